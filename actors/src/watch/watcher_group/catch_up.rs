//! Catch-up: the unsynced watchers served from storage, in passes bounded in watchers and bytes.
//! Each chunk is read from the oldest revision still wanted by a watcher not yet served, so
//! watchers far behind do not hold back those nearer the head; a watcher that reaches what the
//! synced set has seen joins it. Watchers whose next revision was compacted away are canceled
//! with etcd's compact_revision. [`next_pass_after`] paces the passes as etcd does.

use std::collections::HashMap;
use std::time::Duration;

use actcd_proto::key_range::KeyRange;
use actcd_proto::watch_reply::{Events, WatchReply};
use smallvec::SmallVec;

use crate::watch::messages::StreamId;
use crate::watch::watcher::{flags, Watcher};
use actcd_store::HistoryChunk;

use super::encoded::Encoded;
use super::group::{header, is_delete, key_of, revision_of, WatcherGroup};
use super::history::History;
use super::outbox::{Delivery, Outbox};

/// History chunks read in one catch-up pass at most.
const CHUNKS_PER_PASS: usize = 4;

/// Bounds of one catch-up pass.
#[derive(Debug, Clone, Copy)]
pub struct SyncLimits {
    /// Unsynced watchers served per pass (etcd: 512).
    pub watchers: usize,
    /// History bytes read per pass; a response never holds more (plus one revision), far
    /// below the 4 MiB a client accepts by default.
    pub bytes: usize,
}

impl Default for SyncLimits {
    fn default() -> Self {
        Self { watchers: 512, bytes: 1 << 20 }
    }
}

/// When the next catch-up pass is due, after a pass that moved `moved` watchers forward (sent
/// them history, or found them caught up), left `left` unsynced and took `took`: etcd's rule
/// (`syncWatchersLoop` in mvcc/watchable_store.go), with progress counted as watchers moved
/// rather than as fewer unsynced (etcd sends a watcher all it missed at once; here a watcher
/// far behind gets it in chunks, over passes). While passes make progress the next comes as
/// soon as this one took, so catch-up gets half the shard's time and everything else (live
/// batches, requests) the other half; otherwise (none left, or none moved: their streams are
/// full) it waits for the periodic tick (`None`).
///
/// Why it matters: a pass serves 512 watchers at most, so 100k watchers that fell behind
/// together need ~100 passes a shard, more when each needs several chunks. At one pass a
/// 100 ms tick that took 10-25 s while the machine sat idle (2026-12-06: 100k watchers over
/// 1000 keys, 32 writers).
pub fn next_pass_after(moved: usize, left: usize, took: Duration) -> Option<Duration> {
    (moved > 0 && left > 0).then_some(took)
}

impl WatcherGroup {
    /// One catch-up pass over the unsynced watchers: cancels those whose history was compacted,
    /// sends the others their next chunks of history, and moves the ones that reach `processed`
    /// into the synced set. Watchers far behind do not hold back those nearer the head: each
    /// chunk is read from the oldest revision still wanted by a watcher not yet served.
    /// Returns how many watchers the pass moved forward (for [`next_pass_after`]).
    pub fn sync(&mut self, history: &impl History, outbox: &mut impl Outbox, limits: SyncLimits) -> usize {
        let moved = self.catch_up(history, outbox, limits);
        self.answer_deferred_progress(outbox);
        moved
    }

    fn catch_up(&mut self, history: &impl History, outbox: &mut impl Outbox, limits: SyncLimits) -> usize {
        if self.unsynced.is_empty() {
            return 0;
        }
        self.cancel_compacted(history, outbox);
        let count = self.unsynced.len().min(limits.watchers);
        let mut pending: Vec<u32> = self.unsynced[..count].to_vec();
        // The next pass starts with the watchers after these (fairness past `limits.watchers`).
        self.unsynced.rotate_left(count);
        let to = self.processed;
        let mut moved = 0;
        for _ in 0..CHUNKS_PER_PASS {
            let Some(from) = pending.iter().filter_map(|s| self.slots.get(*s)).map(Watcher::next_rev).min()
            else {
                return moved;
            };
            if from > to {
                moved += pending.len();
                for slot in pending {
                    self.mark_synced(slot);
                }
                return moved;
            }
            let chunk = match history.history(from, to, limits.bytes) {
                Ok(chunk) => chunk,
                // Compacted meanwhile: the next pass cancels them. Other errors: retry later.
                Err(_) => return moved,
            };
            let (serve, later): (Vec<u32>, Vec<u32>) = pending
                .into_iter()
                .partition(|s| self.slots.get(*s).is_some_and(|w| w.next_rev() < chunk.next));
            let (served, behind) = self.serve_chunk(&chunk, &serve, history, outbox);
            moved += served;
            // Those served and still behind go on with the next chunk of this pass.
            pending = later;
            pending.extend(behind);
        }
        moved
    }

    /// Sends each of `slots` its events of `chunk`, one response per watcher, one message per
    /// stream; those whose stream took it advance past the chunk. Returns how many advanced,
    /// and those of them still behind what the group has seen.
    fn serve_chunk(
        &mut self,
        chunk: &HistoryChunk,
        slots: &[u32],
        history: &impl History,
        outbox: &mut impl Outbox,
    ) -> (usize, Vec<u32>) {
        let (mut served, mut behind) = (0, Vec::new());
        let to = self.processed;
        let events = self.events_of_chunk(chunk, slots, history);
        let mut out: HashMap<StreamId, (Vec<WatchReply>, Vec<u32>)> = HashMap::new();
        for (&slot, evs) in slots.iter().zip(events) {
            let Some(w) = self.slots.get(slot) else { continue };
            let entry = out.entry(w.stream).or_default();
            if !evs.is_empty() {
                entry.0.push(WatchReply {
                    header: header(to),
                    watch_id: w.watch_id,
                    events: evs,
                    ..Default::default()
                });
            }
            entry.1.push(slot);
        }
        for (stream, (responses, slots)) in out {
            let delivered =
                if responses.is_empty() { Delivery::Sent } else { outbox.deliver(stream, responses) };
            match delivered {
                Delivery::Sent => {
                    for slot in slots {
                        let Some(w) = self.slots.get_mut(slot) else { continue };
                        w.set_next_rev(w.next_rev().max(chunk.next));
                        w.set(flags::NOTIFIED);
                        served += 1;
                        if w.next_rev() > self.processed {
                            self.mark_synced(slot);
                        } else {
                            behind.push(slot);
                        }
                    }
                }
                Delivery::Full => {}
                Delivery::Closed => {
                    self.remove_stream(stream);
                }
            }
        }
        (served, behind)
    }

    /// Each of `slots`' events of `chunk`, in revision order. The watchers are indexed by key
    /// first, so an event finds its single-key watchers with one lookup (and is tested against
    /// each range watcher), as etcd's `newWatcherBatch` does. Testing every event against every
    /// watcher instead was 75 % of the server's samples while 100k watchers caught up (perf,
    /// 2026-12-06; passes take 2-3 ms since).
    fn events_of_chunk(&self, chunk: &HistoryChunk, slots: &[u32], history: &impl History) -> Vec<Events> {
        let watchers: Vec<Option<&Watcher>> = slots.iter().map(|s| self.slots.get(*s)).collect();
        // std's SipHash: the keys are the clients'.
        let mut by_key: HashMap<&[u8], SmallVec<[usize; 4]>> = HashMap::new();
        let mut ranges: Vec<usize> = Vec::new();
        for (i, w) in watchers.iter().enumerate() {
            match w.map(Watcher::range) {
                Some(KeyRange::Key(key)) => by_key.entry(key).or_default().push(i),
                Some(_) => ranges.push(i),
                None => {}
            }
        }
        let mut events: Vec<Events> = vec![Events::new(); slots.len()];
        for ev in &chunk.events {
            let (key, revision, delete) = (key_of(ev), revision_of(ev), is_delete(ev));
            let exact = by_key.get(key).map(|v| v.as_slice()).unwrap_or_default();
            let ranged = ranges.iter().filter(|&&i| watchers[i].is_some_and(|w| w.covers(key)));
            let mut encoded = Encoded::default();
            for &i in exact.iter().chain(ranged) {
                let Some(w) = watchers[i] else { continue };
                if revision >= w.next_rev() && w.wants(delete) {
                    events[i].push(encoded.get(ev, w.has(flags::PREV_KV), history));
                }
            }
        }
        events
    }

    fn cancel_compacted(&mut self, history: &impl History, outbox: &mut impl Outbox) {
        let compacted = history.compacted();
        let mut doomed: HashMap<StreamId, Vec<u32>> = HashMap::new();
        for slot in &self.unsynced {
            if let Some(w) = self.slots.get(*slot) {
                if w.next_rev() < compacted {
                    doomed.entry(w.stream).or_default().push(*slot);
                }
            }
        }
        for (stream, slots) in doomed {
            let responses = slots
                .iter()
                .filter_map(|s| self.slots.get(*s))
                .map(|w| WatchReply {
                    header: header(0),
                    watch_id: w.watch_id,
                    canceled: true,
                    compact_revision: compacted,
                    ..Default::default()
                })
                .collect();
            match outbox.deliver(stream, responses) {
                Delivery::Sent => slots.into_iter().for_each(|s| self.remove_slot(s)),
                Delivery::Full => {}
                Delivery::Closed => {
                    self.remove_stream(stream);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest};
    use bytes::Bytes;

    use crate::watch::messages::WatchSpec;
    use crate::watch::watcher_group::test_support::{spec, Buffers, Fixture};
    use actcd_store::Command;

    #[test]
    fn passes_follow_each_other_while_they_make_progress() {
        let took = Duration::from_millis(3);
        assert_eq!(next_pass_after(512, 99_488, took), Some(took), "progress: again after as long");
        assert_eq!(next_pass_after(600, 0, took), None, "all caught up: nothing to hurry");
        assert_eq!(next_pass_after(0, 600, took), None, "their streams are full: wait for the tick");
        assert_eq!(next_pass_after(0, 0, took), None);
    }

    #[test]
    fn catch_up_finds_each_watchers_events_by_key_range_filter_and_start() {
        let mut f = Fixture::new();
        for (key, value) in [("a", "1"), ("b", "2"), ("a", "3"), ("b", "4"), ("c", "5")] {
            f.put(key, value); // revisions 2..=6
        }
        f.commit(vec![Command::DeleteRange(DeleteRangeRequest {
            key: Bytes::from_static(b"a"),
            ..Default::default()
        })]); // revision 7
        let (view, mut group) = f.watching(&spec(1, 0, "a", "", 2));
        group.add(&spec(1, 1, "b", "", 4));
        group.add(&spec(1, 2, "a", "", 2)); // two watchers of one key
        group.add(&spec(2, 0, "a", "c", 2));
        group.add(&WatchSpec { no_put: true, ..spec(2, 1, "a", "", 2) });
        group.add(&spec(3, 0, "b", "\0", 3));
        group.add(&spec(3, 1, "zz", "", 2)); // nothing in the chunk
        let mut out = Buffers::new(10);
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(1), [(0, vec![2, 4, 7]), (1, vec![5]), (2, vec![2, 4, 7])]);
        assert_eq!(out.drain(2), [(0, vec![2, 3, 4, 5, 7]), (1, vec![7])]);
        assert_eq!(out.drain(3), [(0, vec![3, 5, 6])]);
        assert_eq!(group.unsynced_len(), 0, "all caught up, those with no events too");
    }

    #[test]
    fn a_watcher_far_behind_gets_the_chunks_of_a_pass_one_after_another() {
        let mut f = Fixture::new();
        for _ in 0..5 {
            f.put("k", "v"); // revisions 2..=6
        }
        let (view, mut group) = f.watching(&spec(1, 0, "k", "", 2));
        let mut out = Buffers::new(10);
        // One revision a chunk: the pass's four chunks all go to the one watcher.
        let limits = SyncLimits { watchers: 512, bytes: 1 };
        assert_eq!(group.sync(&view, &mut out, limits), 4, "moved once a chunk");
        assert_eq!(out.drain(1), [(0, vec![2]), (0, vec![3]), (0, vec![4]), (0, vec![5])]);
        assert_eq!(group.unsynced_len(), 1);
        assert_eq!(group.sync(&view, &mut out, limits), 1);
        assert_eq!(out.drain(1), [(0, vec![6])]);
        assert_eq!(group.unsynced_len(), 0);
        assert_eq!(group.sync(&view, &mut out, limits), 0, "nothing left to move");
    }

    #[test]
    fn a_full_stream_is_caught_up_from_storage_in_order_without_duplicates() {
        let mut f = Fixture::new();
        let mut out = Buffers::new(1);
        let (view, mut group) = f.watching(&spec(1, 0, "k", "", 2));
        for _ in 0..5 {
            let batch = f.put("k", "v");
            group.on_committed(&batch, &view, &mut out);
        }
        // Only the first revision fit; the watcher fell back to unsynced at revision 3.
        assert_eq!(group.unsynced_len(), 1);
        assert_eq!(out.drain(1), [(0, vec![2])]);
        let mut out = Buffers::new(10);
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(1), [(0, vec![3, 4, 5, 6])]);
        assert_eq!(group.unsynced_len(), 0);
        let batch = f.put("k", "v");
        group.on_committed(&batch, &view, &mut out);
        assert_eq!(out.drain(1), [(0, vec![7])]);
    }

    #[test]
    fn watchers_behind_a_compaction_are_canceled_and_gaps_are_filled_from_storage() {
        let mut f = Fixture::new();
        for _ in 0..4 {
            f.put("k", "v");
        }
        let mut out = Buffers::new(10);
        let (view, mut group) = f.watching(&spec(1, 7, "k", "", 2));
        f.commit(vec![Command::Compact(CompactionRequest { revision: 4, physical: true })]);
        group.sync(&view, &mut out, SyncLimits::default());
        let got = out.got.remove(&1).unwrap_or_default().concat();
        assert_eq!(got.len(), 1);
        assert!(got[0].canceled && got[0].compact_revision == 4 && got[0].watch_id == 7);
        assert!(group.is_empty());

        // A batch that does not follow on from the last one: the synced set catches up.
        group.add(&spec(1, 8, "k", "", 6));
        f.put("k", "lost");
        let batch = f.put("k", "seen");
        group.on_committed(&batch, &view, &mut out);
        assert_eq!(group.unsynced_len(), 1);
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(1), [(8, vec![6, 7])]);
    }
}
