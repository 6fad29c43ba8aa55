//! The StreamActor: owns one Watch gRPC stream. It assigns watch ids, answers create / cancel /
//! progress requests, and writes the shard's responses to the client. The decisions live in
//! [`StreamState`], a plain struct; the actor only moves messages.
//!
//! Backpressure: responses go to the client through a small bounded channel. When it is full
//! the actor waits (`ctx.wait`), so its own mailbox fills, so its shard's `try_send` fails, so
//! the shard moves this stream's watchers to its unsynced set and later replays what they
//! missed from storage. Memory stays bounded however slowly the client reads.
//!
//! That channel is a `futures` mpsc rather than tokio's: tokio's allocates a block of 32 slots
//! and cache-padded counters up front (~830 bytes a stream, measured with jemalloc's profiler);
//! the `futures` one allocates per queued message, so an idle stream's channel costs ~200.
//!
//! Ends: the actor stops when its requests fail, when a send finds the client's channel gone,
//! or on [`StopStream`]: from its connection's ConnActor when the connection goes, and from the
//! gRPC edge when hyper drops the response stream (the client reset the stream). The last one
//! is what ends a stream whose client half-closed its side and then reset it on a live
//! connection: no request will come to fail, and an idle stream sends nothing.

use actix::prelude::*;
use actix::WeakRecipient;
use bytes::Bytes;
use futures::channel::mpsc;
use futures::SinkExt;
use prost::Message as _;

use actcd_proto::etcdserverpb::{
    watch_create_request::FilterType, watch_request, WatchCreateRequest, WatchRequest, WatchResponse,
};

use crate::identity::Identity;
use crate::store::mvcc::engine::Engine;
use crate::store::ReadView;
use crate::watch::messages::{
    OutputQuota, PendingOutput, ShardRequest, StreamId, StreamOutput, STREAM_OUTPUT_LIMIT,
};
use crate::watch::watcher::WatchSpec;

/// The stream's mailbox: the shard's messages are bounded by [`OutputQuota`] (the shard then
/// desyncs, see module doc); the room above that quota is for stop requests.
const MAILBOX_CAPACITY: usize = STREAM_OUTPUT_LIMIT + 4;

/// etcd's error texts for refused watch creations.
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";

/// A stream's watches and the rules for creating and canceling them.
#[derive(Debug, Default)]
pub struct StreamState {
    id: StreamId,
    next_watch_id: i64,
    /// Live watch ids, sorted: 8 bytes a watch (a stream has few enough for binary search).
    watches: Vec<i64>,
    /// The live watches that asked for fragmented responses (rare), sorted.
    fragmented: Vec<i64>,
}

fn sorted_insert(ids: &mut Vec<i64>, id: i64) {
    if let Err(at) = ids.binary_search(&id) {
        ids.insert(at, id);
    }
}

fn sorted_remove(ids: &mut Vec<i64>, id: i64) -> bool {
    match ids.binary_search(&id) {
        Ok(at) => {
            ids.remove(at);
            true
        }
        Err(_) => false,
    }
}

/// What a create request leads to.
#[derive(Debug, PartialEq)]
pub struct Created {
    /// The created response, sent before anything else about the watch.
    pub response: WatchResponse,
    /// The watch to add to the shard, unless creation was refused.
    pub watch: Option<WatchSpec>,
}

impl StreamState {
    /// The state of stream `id`.
    pub fn new(id: StreamId) -> Self {
        Self { id, ..Default::default() }
    }

    /// Live watches.
    pub fn len(&self) -> usize {
        self.watches.len()
    }

    /// True when no watch is live.
    pub fn is_empty(&self) -> bool {
        self.watches.is_empty()
    }

    /// etcd's create: empty key means "\0"; a key at or past a non-empty range end is an empty
    /// range; watch_id 0 picks the next unused id; a start revision of 0 means "after
    /// `current`". The created response's header revision is `current`.
    pub fn create(&mut self, req: WatchCreateRequest, current: i64) -> Created {
        let key = if req.key.is_empty() { Bytes::from_static(b"\0") } else { req.key };
        let refused = |reason: &str| Created {
            response: WatchResponse {
                header: header(current),
                watch_id: -1,
                created: true,
                canceled: true,
                cancel_reason: reason.to_string(),
                ..Default::default()
            },
            watch: None,
        };
        let range_end = req.range_end;
        if !range_end.is_empty() && range_end.as_ref() != [0] && key.as_ref() >= range_end.as_ref() {
            return refused(EMPTY_RANGE);
        }
        let watch_id = if req.watch_id == 0 {
            while self.watches.binary_search(&self.next_watch_id).is_ok() {
                self.next_watch_id += 1;
            }
            self.next_watch_id += 1;
            self.next_watch_id - 1
        } else if self.watches.binary_search(&req.watch_id).is_ok() {
            return refused(DUPLICATE_ID);
        } else {
            req.watch_id
        };
        sorted_insert(&mut self.watches, watch_id);
        if req.fragment {
            sorted_insert(&mut self.fragmented, watch_id);
        }
        let start_revision = if req.start_revision == 0 { current + 1 } else { req.start_revision };
        let watch = WatchSpec {
            stream: self.id,
            watch_id,
            key,
            range_end,
            start_revision,
            prev_kv: req.prev_kv,
            no_put: req.filters.contains(&(FilterType::Noput as i32)),
            no_delete: req.filters.contains(&(FilterType::Nodelete as i32)),
            progress_notify: req.progress_notify,
        };
        Created {
            response: WatchResponse {
                header: header(current),
                watch_id,
                created: true,
                ..Default::default()
            },
            watch: Some(watch),
        }
    }

    /// etcd's cancel: a known id is removed and answered with a canceled response at
    /// `current`; an unknown id gets no answer.
    pub fn cancel(&mut self, watch_id: i64, current: i64) -> Option<WatchResponse> {
        if !sorted_remove(&mut self.watches, watch_id) {
            return None;
        }
        sorted_remove(&mut self.fragmented, watch_id);
        Some(WatchResponse { header: header(current), watch_id, canceled: true, ..Default::default() })
    }

    /// Filters the shard's responses: drops those of watches canceled since (their events
    /// may still be in flight), forgets watches the shard canceled (compaction), and splits
    /// oversized responses of watches that asked for fragments (etcd's sendFragments).
    pub fn outgoing(&mut self, responses: Vec<WatchResponse>, max_bytes: usize) -> Vec<WatchResponse> {
        let mut out = Vec::with_capacity(responses.len());
        for resp in responses {
            if resp.watch_id == -1 {
                out.push(resp);
                continue;
            }
            if self.watches.binary_search(&resp.watch_id).is_err() {
                continue;
            }
            let fragment = self.fragmented.binary_search(&resp.watch_id).is_ok();
            if resp.canceled {
                sorted_remove(&mut self.watches, resp.watch_id);
                sorted_remove(&mut self.fragmented, resp.watch_id);
            }
            if fragment && resp.events.len() > 1 && resp.encoded_len() >= max_bytes {
                fragments(resp, max_bytes, &mut out);
            } else {
                out.push(resp);
            }
        }
        out
    }
}

fn header(revision: i64) -> Option<actcd_proto::etcdserverpb::ResponseHeader> {
    Some(actcd_proto::etcdserverpb::ResponseHeader { revision, ..Default::default() })
}

/// Splits a response into pieces below `max_bytes` (each with at least one event); all but the
/// last carry `fragment = true`.
fn fragments(resp: WatchResponse, max_bytes: usize, out: &mut Vec<WatchResponse>) {
    let template = WatchResponse { events: Vec::new(), ..resp.clone() };
    let mut current = WatchResponse { fragment: true, ..template.clone() };
    for event in resp.events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= max_bytes {
            let last = current.events.pop();
            out.push(std::mem::replace(&mut current, WatchResponse { fragment: true, ..template.clone() }));
            current.events.extend(last);
        }
    }
    current.fragment = false;
    out.push(current);
}

/// Stop a stream (its connection went away, or its response stream was dropped).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopStream;

/// Told to the connection's actor when a stream ends.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StreamEnded(pub StreamId);

/// Everything a new stream actor needs but its channel to the client.
pub struct StreamSetup<E: Engine> {
    /// The stream id.
    pub id: StreamId,
    /// The shard holding this stream's watches. Weak, as the shard's address of the stream is:
    /// a strong address allocates a sender of its own (~110 bytes a stream), a weak one
    /// becomes a sender only for the rare request. The server holds its shards for its life.
    pub shard: WeakRecipient<ShardRequest>,
    /// For the current revision at create and cancel.
    pub view: ReadView<E>,
    /// Header identity.
    pub identity: Identity,
    /// Responses at least this large are fragmented when the watch asked for it.
    pub max_bytes: usize,
    /// The connection's actor, told when the stream ends (weak: the connection's registry
    /// keeps it alive, and a strong address would allocate per stream).
    pub conn: Option<WeakRecipient<StreamEnded>>,
}

/// The actor of one Watch stream.
pub struct StreamActor<E: Engine> {
    state: StreamState,
    setup: StreamSetup<E>,
    /// The client's channel, lent to the send in progress (`None` meanwhile). Lent, not
    /// cloned: a clone of a `futures` sender allocates.
    output: Option<mpsc::Sender<Box<WatchResponse>>>,
    /// Responses to send once the send in flight is done. `ctx.wait` does not keep every
    /// handler out while it waits: actix may run one client request between a mailbox
    /// handler's `ctx.wait` and that wait's first poll. Holds at most that request's answer;
    /// empty (no allocation) otherwise.
    backlog: Vec<(Vec<WatchResponse>, Option<PendingOutput>)>,
    quota: OutputQuota,
}

impl<E: Engine> StreamActor<E> {
    /// A stream actor writing to `output` (bounded); feed it the request stream with
    /// `ctx.add_stream`.
    pub fn new(setup: StreamSetup<E>, output: mpsc::Sender<Box<WatchResponse>>) -> Self {
        Self {
            state: StreamState::new(setup.id),
            setup,
            output: Some(output),
            backlog: Vec::new(),
            quota: OutputQuota::default(),
        }
    }

    /// Sends responses to the client in order, pausing the actor until they are queued. For
    /// the shard's output, `shard_output` is its pending token: dropped, and its slot of the
    /// shard's quota given back, once the client's channel took the responses (here, not in a
    /// second `ctx.wait`: actix polls wait futures last-in first-out).
    fn send(
        &mut self,
        mut responses: Vec<WatchResponse>,
        shard_output: Option<PendingOutput>,
        ctx: &mut Context<Self>,
    ) {
        for r in &mut responses {
            self.setup.identity.fill(&mut r.header);
        }
        // The channel is lent to the send in flight (or gone with the client, and the actor
        // stopping): queue behind it.
        let Some(mut output) = self.output.take() else {
            self.backlog.push((responses, shard_output));
            return;
        };
        ctx.wait(
            async move {
                for r in responses {
                    if output.send(Box::new(r)).await.is_err() {
                        return None;
                    }
                }
                Some(output)
            }
            .into_actor(self)
            .map(move |output, actor, ctx| {
                if let Some(pending) = shard_output {
                    actor.quota.release();
                    drop(pending);
                }
                actor.output = output;
                if actor.output.is_none() {
                    tracing::debug!(
                        stream = actor.setup.id,
                        "watch stream ends: the client's response stream is gone"
                    );
                    ctx.stop();
                    return;
                }
                for (responses, shard_output) in std::mem::take(&mut actor.backlog) {
                    actor.send(responses, shard_output, ctx);
                }
            }),
        );
    }

    /// Sends a request to the shard, pausing the actor until the shard's mailbox takes it.
    fn ask_shard(&mut self, request: ShardRequest, ctx: &mut Context<Self>) {
        let Some(shard) = self.setup.shard.upgrade() else {
            tracing::debug!("watch stream ends: its shard is gone");
            ctx.stop();
            return;
        };
        ctx.wait(async move { shard.send(request).await.is_ok() }.into_actor(self).map(|ok, _, ctx| {
            if !ok {
                tracing::debug!("watch stream ends: its shard is gone");
                ctx.stop();
            }
        }));
    }
}

impl<E: Engine> Actor for StreamActor<E> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        metrics::gauge!("actcd_actors", "actor" => "stream").increment(1.0);
        metrics::gauge!("actcd_actor_heap_bytes", "actor" => "stream")
            .increment(std::mem::size_of::<Self>() as f64);
        let outbox = ctx.address().downgrade().recipient();
        let quota = self.quota.clone();
        self.ask_shard(ShardRequest::Register { stream: self.setup.id, outbox, quota }, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        metrics::gauge!("actcd_actors", "actor" => "stream").decrement(1.0);
        metrics::gauge!("actcd_actor_heap_bytes", "actor" => "stream")
            .decrement(std::mem::size_of::<Self>() as f64);
        // Cleanup must not be lost, and it is one message per stream, not a fan-out: do_send
        // queues it even when the shard's mailbox is full.
        if let Some(shard) = self.setup.shard.upgrade() {
            shard.do_send(ShardRequest::RemoveStream(self.setup.id));
        }
        if let Some(conn) = self.setup.conn.as_ref().and_then(WeakRecipient::upgrade) {
            conn.do_send(StreamEnded(self.setup.id));
        }
    }
}

/// The client's requests; the gRPC edge ends the stream at the first transport error.
impl<E: Engine> StreamHandler<WatchRequest> for StreamActor<E> {
    fn handle(&mut self, request: WatchRequest, ctx: &mut Self::Context) {
        match request.request_union {
            Some(watch_request::RequestUnion::CreateRequest(create)) => {
                let created = self.state.create(create, self.setup.view.revision());
                self.send(vec![created.response], None, ctx);
                if let Some(watch) = created.watch {
                    self.ask_shard(ShardRequest::Add(watch), ctx);
                }
            }
            Some(watch_request::RequestUnion::CancelRequest(cancel)) => {
                if let Some(response) = self.state.cancel(cancel.watch_id, self.setup.view.revision()) {
                    self.ask_shard(
                        ShardRequest::Cancel { stream: self.setup.id, watch_id: cancel.watch_id },
                        ctx,
                    );
                    self.send(vec![response], None, ctx);
                }
            }
            Some(watch_request::RequestUnion::ProgressRequest(_)) => {
                self.ask_shard(ShardRequest::Progress(self.setup.id), ctx);
            }
            None => {}
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        // The gRPC edge ends the request stream only on a transport error or a reset.
        tracing::debug!(stream = self.setup.id, "watch stream ends: the client's requests failed");
        ctx.stop();
    }
}

impl<E: Engine> Handler<StreamOutput> for StreamActor<E> {
    type Result = ();

    fn handle(&mut self, msg: StreamOutput, ctx: &mut Self::Context) {
        let StreamOutput { responses, pending } = msg;
        let responses = self.state.outgoing(responses, self.setup.max_bytes);
        if responses.is_empty() {
            self.quota.release();
        } else {
            // If the stream stops before the send is done, `pending` is dropped with it.
            self.send(responses, Some(pending), ctx);
        }
    }
}

impl<E: Engine> Handler<StopStream> for StreamActor<E> {
    type Result = ();

    fn handle(&mut self, _: StopStream, ctx: &mut Self::Context) {
        tracing::debug!(
            stream = self.setup.id,
            "watch stream ends: its connection closed or its response stream was dropped"
        );
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::mvccpb::{Event, KeyValue};
    use futures::StreamExt;

    fn create(key: &'static str, end: &'static str, id: i64) -> WatchCreateRequest {
        WatchCreateRequest {
            key: Bytes::from_static(key.as_bytes()),
            range_end: Bytes::from_static(end.as_bytes()),
            watch_id: id,
            ..Default::default()
        }
    }

    #[test]
    fn ids_ranges_and_duplicates_follow_etcd() {
        let mut s = StreamState::new(7);
        let a = s.create(create("a", "", 0), 5);
        assert_eq!((a.response.watch_id, a.response.created, a.response.canceled), (0, true, false));
        assert_eq!(a.watch.as_ref().map(|w| w.start_revision), Some(6));
        let chosen = s.create(create("b", "", 1), 5);
        assert_eq!(chosen.response.watch_id, 1);
        assert_eq!(s.create(create("c", "", 0), 5).response.watch_id, 2, "auto ids skip taken ones");
        let dup = s.create(create("d", "", 1), 5);
        assert_eq!((dup.response.watch_id, dup.response.canceled, dup.watch), (-1, true, None));
        assert_eq!(dup.response.cancel_reason, DUPLICATE_ID);
        let empty = s.create(create("b", "a", 0), 5);
        assert_eq!(empty.response.cancel_reason, EMPTY_RANGE);
        let from_key = s.create(create("b", "\0", 0), 5);
        assert!(from_key.watch.is_some());
        let all = s.create(create("", "\0", 0), 5);
        assert_eq!(all.watch.map(|w| w.key), Some(Bytes::from_static(b"\0")));
        assert!(s.cancel(1, 9).is_some_and(|r| r.canceled && r.watch_id == 1));
        assert!(s.cancel(1, 9).is_none(), "unknown ids get no answer");
    }

    /// A shard that takes every request and answers nothing.
    struct SilentShard;

    impl Actor for SilentShard {
        type Context = Context<Self>;
    }

    impl Handler<ShardRequest> for SilentShard {
        type Result = ();

        fn handle(&mut self, _: ShardRequest, _: &mut Self::Context) {}
    }

    fn request(create: WatchCreateRequest) -> WatchRequest {
        WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) }
    }

    /// actix runs one stream item between a mailbox handler's `ctx.wait` and that wait's first
    /// poll: a create that arrives with shard output, in the same poll, finds the client's
    /// channel lent out. It once stopped the stream (the client saw it end cleanly).
    #[test]
    fn a_create_that_arrives_during_a_send_is_answered_after_it() {
        use crate::store::mvcc::memory::MemoryEngine;
        use crate::store::{StoreConfig, StoreCore};

        let system = actix::System::new();
        let answers = system.block_on(async {
            let core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("store");
            let shard = SilentShard.start();
            let setup = StreamSetup {
                id: 1,
                shard: shard.downgrade().recipient(),
                view: core.read_view(),
                identity: Identity::new("test", &[]),
                max_bytes: 1 << 20,
                conn: None,
            };
            let (output, mut responses) = mpsc::channel(16);
            let (requests, incoming) = mpsc::unbounded();
            requests.unbounded_send(request(create("a", "", 0))).expect("queued");
            let stream = StreamActor::create(move |ctx| {
                ctx.add_stream(incoming);
                StreamActor::new(setup, output)
            });
            // Both ready before the actor's first poll: the mailbox handler starts a send, then
            // the stream item is handled before that send's first poll.
            let progress = WatchResponse { watch_id: -1, ..Default::default() };
            stream.try_send(StreamOutput::new(vec![progress])).expect("mailbox has room");
            let mut answers = Vec::new();
            for _ in 0..2 {
                let next = tokio::time::timeout(std::time::Duration::from_secs(5), responses.next()).await;
                answers.push(next.ok().flatten().map(|r| (r.watch_id, r.created)));
            }
            answers
        });
        assert_eq!(answers, vec![Some((-1, false)), Some((0, true))]);
    }

    #[test]
    fn outgoing_drops_canceled_and_fragments_big_responses() {
        let mut s = StreamState::new(1);
        s.create(WatchCreateRequest { fragment: true, ..create("k", "\0", 0) }, 1);
        s.create(create("k", "\0", 0), 1);
        let ev = |i: u8| Event {
            kv: Some(KeyValue {
                key: Bytes::from(vec![b'k', i]),
                value: Bytes::from(vec![0; 100]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let big =
            |id| WatchResponse { watch_id: id, events: (0..10).map(ev).collect(), ..Default::default() };
        let out = s.outgoing(vec![big(0), big(1)], 300);
        let fragmented: Vec<_> = out.iter().filter(|r| r.watch_id == 0).collect();
        assert!(fragmented.len() > 1);
        assert!(fragmented[..fragmented.len() - 1].iter().all(|r| r.fragment));
        assert!(!fragmented.last().is_some_and(|r| r.fragment));
        assert_eq!(fragmented.iter().map(|r| r.events.len()).sum::<usize>(), 10);
        assert_eq!(out.iter().filter(|r| r.watch_id == 1).count(), 1, "no fragment unless asked");
        s.cancel(1, 2);
        assert!(s.outgoing(vec![big(1)], 300).is_empty(), "events of a canceled watch are dropped");
    }
}
