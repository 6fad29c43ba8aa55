//! The plain state of one Watch stream, driven by [`super::stream::StreamActor`]: the watch ids
//! it assigned, etcd's rules for create, cancel and progress requests, and the shaping of the
//! shard's responses on their way out (dropping those of canceled watches, fragmenting big ones
//! for watches that asked). No actor runtime: tests call it directly.

use bytes::Bytes;
use prost::Message as _;

use actcd_proto::etcdserverpb::{
    watch_create_request::FilterType, watch_request, WatchCreateRequest, WatchRequest,
};
use actcd_proto::watch_reply::{Events, WatchReply};

use super::messages::{ShardRequest, StreamId, WatchSpec};
use super::watch_ids::WatchIds;

use actcd_proto::errors::mvcc::{DUPLICATE_WATCH_ID as DUPLICATE_ID, EMPTY_WATCHER_RANGE as EMPTY_RANGE};
/// etcd's error texts for refused watch creations.
use actcd_proto::key_range::KeyRange;

/// A stream's watches and the rules for creating and canceling them.
#[derive(Debug, Default)]
pub struct StreamState {
    id: StreamId,
    next_watch_id: i64,
    /// Live watch ids.
    watches: WatchIds,
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

/// What the stream does for one client request, in order.
pub enum Step {
    /// Send this response to the client.
    Respond(WatchReply),
    /// Ask the shard that holds the stream's watches.
    AskShard(ShardRequest),
}

/// What a create request leads to.
#[derive(Debug, PartialEq)]
pub struct Created {
    /// The created response, sent before anything else about the watch.
    pub response: WatchReply,
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

    /// The steps for one client request at revision `current`: a create is answered, then its
    /// watch goes to the shard (the created response comes before anything about the watch); a
    /// cancel of a known watch goes to the shard, then is answered; a progress request is the
    /// shard's to answer.
    pub fn on_request(&mut self, request: WatchRequest, current: i64) -> [Option<Step>; 2] {
        match request.request_union {
            Some(watch_request::RequestUnion::CreateRequest(create)) => {
                let created = self.create(create, current);
                [
                    Some(Step::Respond(created.response)),
                    created.watch.map(|w| Step::AskShard(ShardRequest::Add(w))),
                ]
            }
            Some(watch_request::RequestUnion::CancelRequest(cancel)) => match self
                .cancel(cancel.watch_id, current)
            {
                Some(response) => [
                    Some(Step::AskShard(ShardRequest::Cancel { stream: self.id, watch_id: cancel.watch_id })),
                    Some(Step::Respond(response)),
                ],
                None => [None, None],
            },
            Some(watch_request::RequestUnion::ProgressRequest(_)) => {
                [Some(Step::AskShard(ShardRequest::Progress { stream: self.id, at: current })), None]
            }
            None => [None, None],
        }
    }

    /// The answer to a create that is refused for `reason`, at revision `current`.
    pub fn refused(current: i64, reason: &str) -> WatchReply {
        WatchReply {
            header: header(current),
            watch_id: -1,
            created: true,
            canceled: true,
            cancel_reason: reason.to_string(),
            ..Default::default()
        }
    }

    /// etcd's create: empty key means "\0"; a key at or past a non-empty range end is an empty
    /// range; watch_id 0 picks the next unused id; a start revision of 0 means "after
    /// `current`". The created response's header revision is `current`.
    pub fn create(&mut self, req: WatchCreateRequest, current: i64) -> Created {
        let key = if req.key.is_empty() { Bytes::from_static(b"\0") } else { req.key };
        let refused = |reason: &str| Created { response: Self::refused(current, reason), watch: None };
        let range_end = req.range_end;
        if KeyRange::new(&key, &range_end).is_empty() {
            return refused(EMPTY_RANGE);
        }
        let watch_id = if req.watch_id == 0 {
            while self.watches.contains(self.next_watch_id) {
                self.next_watch_id += 1;
            }
            self.next_watch_id += 1;
            self.next_watch_id - 1
        } else if self.watches.contains(req.watch_id) {
            return refused(DUPLICATE_ID);
        } else {
            req.watch_id
        };
        self.watches.insert(watch_id);
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
            response: WatchReply { header: header(current), watch_id, created: true, ..Default::default() },
            watch: Some(watch),
        }
    }

    /// etcd's cancel: a known id is removed and answered with a canceled response at
    /// `current`; an unknown id gets no answer.
    pub fn cancel(&mut self, watch_id: i64, current: i64) -> Option<WatchReply> {
        if !self.watches.remove(watch_id) {
            return None;
        }
        sorted_remove(&mut self.fragmented, watch_id);
        Some(WatchReply { header: header(current), watch_id, canceled: true, ..Default::default() })
    }

    /// Filters the shard's responses: drops those of watches canceled since (their events
    /// may still be in flight), forgets watches the shard canceled (compaction), and splits
    /// oversized responses of watches that asked for fragments (etcd's sendFragments).
    pub fn outgoing(&mut self, responses: Vec<WatchReply>, max_bytes: usize) -> Vec<WatchReply> {
        let mut out = Vec::with_capacity(responses.len());
        for resp in responses {
            if resp.watch_id == -1 {
                out.push(resp);
                continue;
            }
            if !self.watches.contains(resp.watch_id) {
                continue;
            }
            let fragment = self.fragmented.binary_search(&resp.watch_id).is_ok();
            if resp.canceled {
                self.watches.remove(resp.watch_id);
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
fn fragments(resp: WatchReply, max_bytes: usize, out: &mut Vec<WatchReply>) {
    let template = WatchReply { events: Events::new(), ..resp.clone() };
    let mut current = WatchReply { fragment: true, ..template.clone() };
    for event in resp.events {
        current.events.push(event);
        if current.events.len() > 1 && current.encoded_len() >= max_bytes {
            let last = current.events.pop();
            out.push(std::mem::replace(&mut current, WatchReply { fragment: true, ..template.clone() }));
            current.events.extend(last);
        }
    }
    current.fragment = false;
    out.push(current);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{WatchCancelRequest, WatchProgressRequest};
    use actcd_proto::mvccpb::{Event, KeyValue};
    use actcd_proto::watch_reply::SharedEvent;

    pub(crate) fn create(key: &'static str, end: &'static str, id: i64) -> WatchCreateRequest {
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

    #[test]
    fn outgoing_drops_canceled_and_fragments_big_responses() {
        let mut s = StreamState::new(1);
        s.create(WatchCreateRequest { fragment: true, ..create("k", "\0", 0) }, 1);
        s.create(create("k", "\0", 0), 1);
        let ev = |i: u8| {
            SharedEvent::new(&Event {
                kv: Some(KeyValue {
                    key: Bytes::from(vec![b'k', i]),
                    value: Bytes::from(vec![0; 100]),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let big = |id| WatchReply { watch_id: id, events: (0..10).map(ev).collect(), ..Default::default() };
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

    #[test]
    fn requests_become_steps_in_the_order_the_client_must_see_them() {
        let request = |union| WatchRequest { request_union: Some(union) };
        let create_req = |key, end| request(watch_request::RequestUnion::CreateRequest(create(key, end, 0)));
        let cancel =
            |watch_id| request(watch_request::RequestUnion::CancelRequest(WatchCancelRequest { watch_id }));
        let mut s = StreamState::new(3);
        let [first, second] = s.on_request(create_req("a", ""), 5);
        assert!(matches!(first, Some(Step::Respond(r)) if r.created && r.watch_id == 0));
        assert!(
            matches!(second, Some(Step::AskShard(ShardRequest::Add(w))) if w.stream == 3 && w.start_revision == 6)
        );
        let refused = s.on_request(create_req("b", "a"), 5);
        assert!(matches!(refused, [Some(Step::Respond(r)), None] if r.canceled), "no watch for the shard");

        let [first, second] = s.on_request(cancel(0), 7);
        assert!(matches!(first, Some(Step::AskShard(ShardRequest::Cancel { stream: 3, watch_id: 0 }))));
        assert!(matches!(second, Some(Step::Respond(r)) if r.canceled && r.watch_id == 0));
        assert!(matches!(s.on_request(cancel(0), 7), [None, None]), "an unknown id gets nothing");

        let progress = request(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest::default()));
        assert!(matches!(
            s.on_request(progress, 7),
            [Some(Step::AskShard(ShardRequest::Progress { stream: 3, at: 7 })), None]
        ));
        assert!(matches!(s.on_request(WatchRequest { request_union: None }, 7), [None, None]));
    }
}
