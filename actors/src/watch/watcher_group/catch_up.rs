//! Catch-up: the unsynced watchers served from storage, in passes bounded in watchers and bytes.
//! Each chunk is read from the oldest revision still wanted by a watcher not yet served, so
//! watchers far behind do not hold back those nearer the head; a watcher that reaches what the
//! synced set has seen joins it. Watchers whose next revision was compacted away are canceled
//! with etcd's compact_revision.

use std::collections::HashMap;

use actcd_proto::watch_reply::WatchReply;

use crate::store::HistoryChunk;
use crate::watch::messages::StreamId;
use crate::watch::watcher::{flags, Watcher};

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

impl WatcherGroup {
    /// One catch-up pass over the unsynced watchers: cancels those whose history was compacted,
    /// sends the others their next chunks of history, and moves the ones that reach `processed`
    /// into the synced set. Watchers far behind do not hold back those nearer the head: each
    /// chunk is read from the oldest revision still wanted by a watcher not yet served.
    pub fn sync(&mut self, history: &impl History, outbox: &mut impl Outbox, limits: SyncLimits) {
        self.catch_up(history, outbox, limits);
        self.answer_deferred_progress(outbox);
    }

    fn catch_up(&mut self, history: &impl History, outbox: &mut impl Outbox, limits: SyncLimits) {
        if self.unsynced.is_empty() {
            return;
        }
        self.cancel_compacted(history, outbox);
        let count = self.unsynced.len().min(limits.watchers);
        let mut pending: Vec<u32> = self.unsynced[..count].to_vec();
        // The next pass starts with the watchers after these (fairness past `limits.watchers`).
        self.unsynced.rotate_left(count);
        let to = self.processed;
        for _ in 0..CHUNKS_PER_PASS {
            let Some(from) = pending.iter().filter_map(|s| self.slots.get(*s)).map(Watcher::next_rev).min()
            else {
                return;
            };
            if from > to {
                for slot in pending {
                    self.mark_synced(slot);
                }
                return;
            }
            let chunk = match history.history(from, to, limits.bytes) {
                Ok(chunk) => chunk,
                // Compacted meanwhile: the next pass cancels them. Other errors: retry later.
                Err(_) => return,
            };
            let (serve, later): (Vec<u32>, Vec<u32>) = pending
                .into_iter()
                .partition(|s| self.slots.get(*s).is_some_and(|w| w.next_rev() < chunk.next));
            self.serve_chunk(&chunk, &serve, history, outbox);
            pending = later;
        }
    }

    /// Sends each of `slots` its events of `chunk`, one response per watcher, one message per
    /// stream; those whose stream took it advance past the chunk.
    fn serve_chunk(
        &mut self,
        chunk: &HistoryChunk,
        slots: &[u32],
        history: &impl History,
        outbox: &mut impl Outbox,
    ) {
        let to = self.processed;
        let mut out: HashMap<StreamId, (Vec<WatchReply>, Vec<u32>)> = HashMap::new();
        let mut encoded: Vec<Encoded> = Vec::new();
        encoded.resize_with(chunk.events.len(), Encoded::default);
        for &slot in slots {
            let Some(w) = self.slots.get(slot) else { continue };
            let mut evs = Vec::new();
            for (ev, encoded) in chunk.events.iter().zip(encoded.iter_mut()) {
                if revision_of(ev) < w.next_rev() || !w.covers(key_of(ev)) || !w.wants(is_delete(ev)) {
                    continue;
                }
                evs.push(encoded.get(ev, w.has(flags::PREV_KV), history));
            }
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
                        if w.next_rev() > self.processed {
                            self.mark_synced(slot);
                        }
                    }
                }
                Delivery::Full => {}
                Delivery::Closed => {
                    self.remove_stream(stream);
                }
            }
        }
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
    use actcd_proto::etcdserverpb::CompactionRequest;

    use crate::store::Command;
    use crate::watch::watcher_group::test_support::{spec, Buffers, Fixture};

    #[test]
    fn a_full_stream_is_caught_up_from_storage_in_order_without_duplicates() {
        let mut f = Fixture::new();
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        let mut out = Buffers::new(1);
        group.add(&spec(1, 0, "k", "", 2));
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
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        let mut out = Buffers::new(10);
        group.add(&spec(1, 7, "k", "", 2));
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
