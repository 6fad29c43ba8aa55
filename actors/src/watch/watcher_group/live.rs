//! Live delivery: each committed batch the store publishes is matched against the synced
//! watchers (through the range index) and sent as one response per watcher (split at a
//! revision boundary past 1 MiB), one message per stream. Each event is encoded once for all
//! the watchers it reaches (once more with its previous key-value, for those that asked), and
//! their responses share the bytes ([`SharedEvent`]). A stream whose buffer is full sends
//! its watchers back to unsynced from the first revision they missed. A batch that does not
//! follow on from what the group has seen, or batches that stop coming while the store moves
//! on, send every synced watcher back to unsynced: catch-up fills the gap from storage.

// foldhash (hashbrown's default) rather than std's SipHash: the keys are slot numbers and
// stream ids the server assigned, so there is no chosen-key flooding to resist, and hashing
// showed in the profile of a 1000-watcher delivery.
use hashbrown::HashMap;
use smallvec::SmallVec;

use actcd_proto::mvccpb::Event;
use actcd_proto::watch_reply::{Events, SharedEvent, WatchReply};

use crate::watch::messages::StreamId;
use crate::watch::watcher::flags;
use actcd_store::CommittedEvents;

use super::encoded::Encoded;
use super::group::{header, is_delete, key_of, revision_of, WatcherGroup};
use super::history::History;
use super::outbox::{Delivery, Outbox};

/// A stream's responses of one live batch, with the slot and the first and last revision of
/// each.
type LiveBatch = (Vec<WatchReply>, Vec<(u32, i64, i64)>);

/// A live response ends at the first revision boundary past this many bytes of encoded
/// events: like catch-up's chunks, far below the 4 MiB a client accepts by default.
const LIVE_RESPONSE_BYTES: usize = 1 << 20;

/// One watcher's response of a live batch: every revision of the batch it wants, as etcd
/// sends a watcher that fell behind (etcd sends a synced watcher one response per revision;
/// under many writers a group-commit batch holds dozens of revisions, and one response
/// instead of dozens is what lets the stream and its client keep up).
struct Response {
    first: i64,
    last: i64,
    bytes: usize,
    events: Events,
}

impl Response {
    fn new(first: i64) -> Self {
        Self { first, last: first, bytes: 0, events: Events::new() }
    }

    fn push(&mut self, event: SharedEvent, revision: i64) {
        self.bytes += event.len();
        self.last = revision;
        if self.events.len() == 1 {
            // Leaving the inline slot: grow as a Vec would (to 4), not by doubling from 1.
            self.events.reserve(3);
        }
        self.events.push(event);
    }
}

impl WatcherGroup {
    /// Feeds a committed batch to the synced watchers. A batch that does not follow on from
    /// `processed` means batches were dropped upstream: every synced watcher then catches up
    /// from storage instead.
    pub fn on_committed(
        &mut self,
        batch: &CommittedEvents,
        history: &impl History,
        outbox: &mut impl Outbox,
    ) {
        if batch.revision <= self.processed {
            return;
        }
        if batch.prev_revision > self.processed {
            let from = self.processed + 1;
            self.desync_all(from);
            self.processed = batch.revision;
            return;
        }
        let fresh: Vec<&Event> = batch.events.iter().filter(|e| revision_of(e) > self.processed).collect();
        self.processed = batch.revision;
        self.deliver_live(&fresh, history, outbox);
        self.answer_deferred_progress(outbox);
    }

    fn deliver_live(&mut self, events: &[&Event], history: &impl History, outbox: &mut impl Outbox) {
        // Each watcher's response in the making, and the finished ones per stream.
        let mut open: HashMap<u32, Response> = HashMap::new();
        let mut out: HashMap<StreamId, LiveBatch> = HashMap::new();
        let mut start = 0;
        while start < events.len() {
            let rev = revision_of(events[start]);
            let end = start + events[start..].iter().take_while(|e| revision_of(e) == rev).count();
            let mut touched: SmallVec<[u32; 8]> = SmallVec::new();
            for ev in &events[start..end] {
                let mut matched: SmallVec<[u32; 8]> = SmallVec::new();
                self.synced.matches(key_of(ev), |slot| matched.push(slot));
                if open.is_empty() {
                    // Sized once for the usual batch (one revision): no rehash while it fills.
                    open.reserve(matched.len());
                }
                let mut encoded = Encoded::default();
                for slot in matched {
                    let Some(w) = self.slots.get(slot) else { continue };
                    if rev < w.next_rev() || !w.covers(key_of(ev)) || !w.wants(is_delete(ev)) {
                        continue;
                    }
                    let event = encoded.get(ev, w.has(flags::PREV_KV), history);
                    let response = open.entry(slot).or_insert_with(|| Response::new(rev));
                    if response.events.is_empty() || response.last != rev {
                        touched.push(slot);
                    }
                    response.push(event, rev);
                }
            }
            // Responses end at a revision boundary, once they are large enough.
            for slot in touched {
                if open.get(&slot).is_some_and(|r| r.bytes >= LIVE_RESPONSE_BYTES) {
                    if let Some(response) = open.remove(&slot) {
                        self.finish(slot, response, &mut out);
                    }
                }
            }
            start = end;
        }
        // In revision order, then by watcher, so a stream's responses come in a stable order.
        let mut rest: Vec<(u32, Response)> = open.into_iter().collect();
        rest.sort_unstable_by_key(|(slot, r)| (r.first, *slot));
        for (slot, response) in rest {
            self.finish(slot, response, &mut out);
        }
        for (stream, (responses, sent)) in out {
            match outbox.deliver(stream, responses) {
                Delivery::Sent => {
                    for (slot, _, last) in sent {
                        if let Some(w) = self.slots.get_mut(slot) {
                            w.set_next_rev(w.next_rev().max(last + 1));
                        }
                    }
                }
                Delivery::Full => {
                    // The stream missed these: each watcher resumes from its first lost revision.
                    let mut first: HashMap<u32, i64> = HashMap::new();
                    for (slot, rev, _) in sent {
                        first.entry(slot).and_modify(|r| *r = (*r).min(rev)).or_insert(rev);
                    }
                    for (slot, rev) in first {
                        self.desync(slot, rev);
                    }
                }
                Delivery::Closed => {
                    self.remove_stream(stream);
                }
            }
        }
    }

    /// Adds a watcher's finished response to its stream's share of the batch.
    fn finish(&mut self, slot: u32, response: Response, out: &mut HashMap<StreamId, LiveBatch>) {
        let Some(w) = self.slots.get_mut(slot) else { return };
        w.set(flags::NOTIFIED);
        let entry = out.entry(w.stream).or_default();
        entry.0.push(WatchReply {
            header: header(response.last),
            watch_id: w.watch_id,
            events: response.events,
            ..Default::default()
        });
        entry.1.push((slot, response.first, response.last));
    }

    /// Called on a timer with the store's visible revision: if committed batches stopped
    /// arriving while the store moved on (dropped upstream), catch up from storage.
    /// Two checks in a row must see no progress: one may just have come while this shard's
    /// thread was starved of CPU, with batches waiting in its mailbox.
    pub fn check_stalled(&mut self, visible: i64) {
        let idle = visible > self.processed && self.processed == self.processed_at_last_check;
        if idle && self.stalled_checks >= 1 {
            let from = self.processed + 1;
            self.desync_all(from);
            self.processed = visible;
            self.stalled_checks = 0;
        } else if idle {
            self.stalled_checks += 1;
        } else {
            self.stalled_checks = 0;
        }
        self.processed_at_last_check = self.processed;
    }
}

#[cfg(test)]
mod tests {
    use actcd_proto::etcdserverpb::{DeleteRangeRequest, PutRequest};
    use bytes::Bytes;

    use crate::watch::messages::WatchSpec;
    use crate::watch::watcher_group::catch_up::SyncLimits;
    use crate::watch::watcher_group::test_support::{put, spec, Buffers, Fixture};
    use actcd_store::Command;

    #[test]
    fn synced_watchers_get_one_response_per_batch_with_filters_and_prev_kv() {
        let mut f = Fixture::new();
        let mut out = Buffers::new(100);
        let (view, mut group) = f.watching(&spec(1, 0, "a", "", 2));
        group.add(&WatchSpec { prev_kv: true, no_put: true, ..spec(1, 1, "a", "b", 2) });
        group.add(&spec(2, 0, "\0", "\0", 2));

        let batch = f.commit(vec![put("a", "1"), put("b", "2")]);
        group.on_committed(&batch, &view, &mut out);
        let delete =
            Command::DeleteRange(DeleteRangeRequest { key: Bytes::from_static(b"a"), ..Default::default() });
        let batch = f.commit(vec![delete]);
        group.on_committed(&batch, &view, &mut out);

        let got = &out.got[&1];
        let (plain, with_prev) = (&got[1][0].events[0], &got[1][1].events[0]);
        assert!(plain.decode().expect("event").prev_kv.is_none());
        assert_eq!(
            with_prev.decode().expect("event").prev_kv.map(|kv| kv.value),
            Some(Bytes::from_static(b"1"))
        );
        assert!(
            plain.shares_encoding_with(&out.got[&2][1][0].events[0]),
            "one encoding for all its watchers"
        );
        assert_eq!(out.drain(1), [(0, vec![2]), (0, vec![4]), (1, vec![4])]);
        assert_eq!(out.drain(2), [(0, vec![2, 3]), (0, vec![4])], "a batch's revisions in one response");
        let with_prev =
            group.slots.iter().find(|(_, w)| w.stream == 1 && w.watch_id == 1).map(|(_, w)| w.next_rev());
        assert_eq!(with_prev, Some(5));
    }

    #[test]
    fn a_large_batch_is_split_at_the_first_revision_boundary_past_a_mebibyte() {
        let mut f = Fixture::new();
        let mut out = Buffers::new(100);
        let (view, mut group) = f.watching(&spec(1, 0, "k", "", 2));
        let big = |key: &'static str| {
            Command::Put(PutRequest {
                key: Bytes::from_static(key.as_bytes()),
                value: Bytes::from(vec![b'v'; 600 << 10]),
                ..Default::default()
            })
        };
        let batch = f.commit(vec![big("k"), big("k"), big("k"), put("k", "small")]);
        group.on_committed(&batch, &view, &mut out);
        assert_eq!(out.drain(1), [(0, vec![2, 3]), (0, vec![4, 5])]);
        assert_eq!(group.slots.iter().next().map(|(_, w)| w.next_rev()), Some(6));
    }

    #[test]
    fn a_shard_that_stops_hearing_from_the_store_catches_up_after_two_idle_checks() {
        let mut f = Fixture::new();
        let (view, mut group) = f.watching(&spec(1, 0, "k", "", 2));
        f.put("k", "v");
        f.put("k", "v");
        group.check_stalled(view.revision());
        assert_eq!(group.unsynced_len(), 0, "one idle check may be a starved thread");
        group.check_stalled(view.revision());
        assert_eq!(group.unsynced_len(), 1);
        assert_eq!(group.processed(), 3);
        let mut out = Buffers::new(10);
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(1), [(0, vec![2, 3])]);
    }
}
