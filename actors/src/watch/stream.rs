//! The StreamActor: the actix shell of one Watch gRPC stream. The decisions (watch ids, create /
//! cancel / progress, what goes out) live in [`StreamState`], a plain struct; the actor only
//! moves messages: the client's requests to the state and the steps it returns to the shard
//! and the client, the shard's responses through the state to the client.
//!
//! Backpressure: responses go to the client through a small bounded channel. When it is full
//! the actor waits (`ctx.wait`), so its own mailbox fills, so its shard's `try_send` fails, so
//! the shard moves this stream's watchers to its unsynced set and later replays what they
//! missed from storage: as soon as the client has taken a message (the stream's release of its
//! quota wakes the shard), or at the shard's next sync tick. Memory stays bounded however
//! slowly the client reads, and a lagging stream catches up as fast as it reads.
//!
//! That channel is a `futures` mpsc rather than tokio's: tokio's allocates a block of 32 slots
//! and cache-padded counters up front (~830 bytes a stream, measured with jemalloc's profiler);
//! the `futures` one allocates per queued message, so an idle stream's channel costs ~200.
//! A message is a batch: all the responses of one shard output (or of one client request), in
//! order. One send and one wake of the response task per batch, not per response: a put seen by
//! ten watchers of a stream is one channel message, not ten boxed ones.
//!
//! Ends: the actor stops when its requests fail, when a send finds the client's channel gone,
//! or on [`StopStream`]: from its connection's ConnActor when the connection goes, and from the
//! gRPC edge when hyper drops the response stream (the client reset the stream). The last one
//! is what ends a stream whose client half-closed its side and then reset it on a live
//! connection: no request will come to fail, and an idle stream sends nothing.

use actix::prelude::*;
use actix::WeakRecipient;
use futures::channel::mpsc;
use futures::SinkExt;

use actcd_proto::etcdserverpb::{watch_request, WatchRequest};
use actcd_proto::watch_reply::WatchReply;

use crate::identity::Identity;
use actcd_store::backend::engine::Engine;
use actcd_store::ReadView;

use super::messages::{
    OutputQuota, PendingOutput, ShardRequest, StopStream, StreamEnded, StreamId, StreamOutput,
    STREAM_OUTPUT_LIMIT,
};
use super::stream_state::{Step, StreamState};

/// The stream's mailbox: the shard's messages are bounded by [`OutputQuota`] (the shard then
/// desyncs, see module doc); the room above that quota is for stop requests.
const MAILBOX_CAPACITY: usize = STREAM_OUTPUT_LIMIT + 4;

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
    /// Whether the stream's sender may watch a range; `None` lets every watch through.
    pub permit: Option<WatchPermit>,
}

/// Asked with a stream's token, its certificate's Common Name, a create's key and range end.
pub type PermitCheck = dyn Fn(Option<&str>, Option<&str>, &[u8], &[u8]) -> Result<(), String> + Send + Sync;

/// The auth check a watch create passes: READ on the watched range, for the user the stream's
/// token names, against the auth state of the moment of the create (auth may be enabled, or a
/// permission revoked, while the stream lives).
pub struct WatchPermit {
    /// Asked with the stream's token, its client certificate's Common Name and the create's
    /// key and range end (the key already `\0` for an empty one); the refusal's text when the
    /// watch is not permitted.
    pub check: std::sync::Arc<PermitCheck>,
    /// The token the stream was opened with.
    pub token: Option<Box<str>>,
    /// The Common Name of the stream's client certificate.
    pub common_name: Option<std::sync::Arc<str>>,
}

/// The actor of one Watch stream.
pub struct StreamActor<E: Engine> {
    state: StreamState,
    setup: StreamSetup<E>,
    /// The client's channel, lent to the send in progress (`None` meanwhile). Lent, not
    /// cloned: a clone of a `futures` sender allocates.
    output: Option<mpsc::Sender<Vec<WatchReply>>>,
    /// Responses to send once the send in flight is done. `ctx.wait` does not keep every
    /// handler out while it waits: actix may run one client request between a mailbox
    /// handler's `ctx.wait` and that wait's first poll. Holds at most that request's answer;
    /// empty (no allocation) otherwise.
    backlog: Vec<(Vec<WatchReply>, Option<PendingOutput>)>,
    quota: OutputQuota,
}

impl<E: Engine> StreamActor<E> {
    /// A stream actor writing to `output` (bounded); feed it the request stream with
    /// `ctx.add_stream`.
    pub fn new(setup: StreamSetup<E>, output: mpsc::Sender<Vec<WatchReply>>) -> Self {
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
        mut responses: Vec<WatchReply>,
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
                let sent = output.send(responses).await.is_ok();
                sent.then_some(output)
            }
            .into_actor(self)
            .map(move |output, actor, ctx| {
                if let Some(pending) = shard_output {
                    actor.release_quota();
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

    /// Gives the shard's slot back, and tells the shard when it found this stream full: its
    /// watchers wait in the unsynced set for room. `try_send`: with the shard's mailbox full
    /// the wake-up is dropped and the shard's sync tick serves the stream instead.
    fn release_quota(&self) {
        if self.quota.release() {
            if let Some(shard) = self.setup.shard.upgrade() {
                let _ = shard.try_send(ShardRequest::Room);
            }
        }
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
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTORS, "actor" => actcd_store::metric_names::ActorKind::Stream.label()).increment(1.0);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Stream.label())
            .increment(std::mem::size_of::<Self>() as f64);
        let outbox = ctx.address().downgrade().recipient();
        let quota = self.quota.clone();
        self.ask_shard(ShardRequest::Register { stream: self.setup.id, outbox, quota }, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTORS, "actor" => actcd_store::metric_names::ActorKind::Stream.label()).decrement(1.0);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Stream.label())
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
        if let (Some(permit), Some(watch_request::RequestUnion::CreateRequest(create))) =
            (&self.setup.permit, &request.request_union)
        {
            let key: &[u8] = if create.key.is_empty() { b"\0" } else { &create.key };
            if let Err(reason) =
                (permit.check)(permit.token.as_deref(), permit.common_name.as_deref(), key, &create.range_end)
            {
                let refused = StreamState::refused(self.setup.view.revision(), &reason);
                self.send(vec![refused], None, ctx);
                return;
            }
        }
        for step in self.state.on_request(request, self.setup.view.revision()).into_iter().flatten() {
            match step {
                Step::Respond(response) => self.send(vec![response], None, ctx),
                Step::AskShard(request) => self.ask_shard(request, ctx),
            }
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
            self.release_quota();
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
    use crate::watch::stream_state::tests::create;
    use actcd_proto::etcdserverpb::{watch_request, WatchCreateRequest};
    use futures::StreamExt;

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
        use actcd_store::backend::memory::MemoryEngine;
        use actcd_store::{StoreConfig, StoreCore};

        let system = actix::System::new();
        let answers = system.block_on(async {
            let core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("store");
            let shard = SilentShard.start();
            let setup = StreamSetup {
                id: 1,
                shard: shard.downgrade().recipient(),
                view: core.read_view(),
                identity: Identity::new(1, 2),
                max_bytes: 1 << 20,
                conn: None,
                permit: None,
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
            let progress = WatchReply { watch_id: -1, ..Default::default() };
            stream.try_send(StreamOutput::new(vec![progress])).expect("mailbox has room");
            let mut answers = Vec::new();
            while answers.len() < 2 {
                let next = tokio::time::timeout(std::time::Duration::from_secs(5), responses.next()).await;
                let Some(batch) = next.ok().flatten() else { break };
                answers.extend(batch.into_iter().map(|r| (r.watch_id, r.created)));
            }
            answers
        });
        assert_eq!(answers, vec![(-1, false), (0, true)]);
    }
}
