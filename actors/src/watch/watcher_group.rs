//! A shard's watches and everything done to them: matching committed events, catching up
//! watchers that fell behind, progress notifications. A plain struct: tests drive it with a
//! real store and a fake outbox, no actor runtime.
//!
//! Every watcher is in one of two sets (etcd's synced / unsynced groups, with etcd's victims
//! folded into unsynced):
//!
//! ```text
//!   add (start <= processed) ─────────────▶ unsynced ──catch-up from storage reaches processed──▶ synced
//!   add (start >  processed) ─────────────────────────────────────────────────────────────────────▶ synced
//!   synced, its stream's outbox full ───▶ unsynced (next_rev = first revision it missed)
//!   a gap in the committed revisions ───▶ every synced watcher to unsynced
//!   unsynced, next_rev < compaction ────▶ canceled with compact_revision
//! ```
//!
//! `processed` is the revision the synced set has seen. Live events go only to synced
//! watchers, catch-up only to unsynced ones, and a watcher moves to synced only once it has
//! been sent everything up to `processed`: so each watcher gets each revision once, in order.

use std::collections::HashMap;

use smallvec::SmallVec;

use actcd_proto::etcdserverpb::{ResponseHeader, WatchResponse};
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use crate::store::{CommittedEvents, HistoryChunk, StoreError};

use super::messages::StreamId;
use super::range_index::RangeIndex;
use super::slab::WatchSlab;
use super::watcher::{flags, WatchSpec, Watcher};

/// What happened to responses handed to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for the stream.
    Sent,
    /// The stream's buffer is full: nothing was queued.
    Full,
    /// The stream is gone.
    Closed,
}

/// Where a group sends responses, one call per stream per pass.
pub trait Outbox {
    /// Hands `responses` (in order) to `stream`'s buffer, all or nothing.
    fn deliver(&mut self, stream: StreamId, responses: Vec<WatchResponse>) -> Delivery;
}

/// The store as the watch tree reads it.
pub trait History {
    /// Whole revisions of history from `from` to `to` (see `ReadView::history`).
    fn history(&self, from: i64, to: i64, max_bytes: usize) -> Result<HistoryChunk, StoreError>;
    /// A key's value as of `revision`, for prev_kv.
    fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError>;
    /// The compaction revision.
    fn compacted(&self) -> i64;
}

impl<E: crate::store::mvcc::engine::Engine> History for crate::store::ReadView<E> {
    fn history(&self, from: i64, to: i64, max_bytes: usize) -> Result<HistoryChunk, StoreError> {
        crate::store::ReadView::history(self, from, to, max_bytes)
    }
    fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError> {
        crate::store::ReadView::get_at(self, key, revision)
    }
    fn compacted(&self) -> i64 {
        self.compacted_revision()
    }
}

/// A stream's responses of one live batch, with the (slot, revision) behind each.
type LiveBatch = (Vec<WatchResponse>, Vec<(u32, i64)>);

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

/// The watches of one shard.
#[derive(Default)]
pub struct WatcherGroup {
    slots: WatchSlab,
    synced: RangeIndex,
    unsynced: Vec<u32>,
    streams: HashMap<StreamId, SmallVec<[u32; 4]>>,
    processed: i64,
    /// `processed` at the previous stall check.
    processed_at_last_check: i64,
    /// Consecutive stall checks that saw no progress.
    stalled_checks: u8,
}

fn is_delete(ev: &Event) -> bool {
    ev.r#type == EventType::Delete as i32
}

fn revision_of(ev: &Event) -> i64 {
    ev.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

fn key_of(ev: &Event) -> &[u8] {
    ev.kv.as_ref().map_or(&[], |kv| kv.key.as_ref())
}

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader { revision, ..Default::default() })
}

impl WatcherGroup {
    /// An empty group whose synced set starts at `revision`.
    pub fn new(revision: i64) -> Self {
        Self { processed: revision, processed_at_last_check: revision, ..Default::default() }
    }

    /// The revision the synced set has seen.
    pub fn processed(&self) -> i64 {
        self.processed
    }

    /// Watches held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no watch is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Watchers waiting for catch-up (etcd's slow watchers).
    pub fn unsynced_len(&self) -> usize {
        self.unsynced.len()
    }

    /// Streams with at least one watch.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        let streams = self.streams.capacity() * (std::mem::size_of::<(StreamId, SmallVec<[u32; 4]>)>() + 8);
        let spilled: usize = self.streams.values().filter(|l| l.spilled()).map(|l| l.capacity() * 4).sum();
        self.slots.heap_bytes() + streams + spilled + self.synced.heap_bytes() + self.unsynced.capacity() * 4
    }

    /// Gives back memory after many watches went away: drops free slots at the end of the
    /// slab (slot numbers in use never move) and shrinks the containers to what they hold.
    pub fn trim(&mut self) {
        self.slots.trim();
        if self.unsynced.len() < self.unsynced.capacity() / 2 {
            self.unsynced.shrink_to_fit();
        }
        if self.streams.len() < self.streams.capacity() / 2 {
            self.streams.shrink_to_fit();
        }
        self.synced.shrink_to_fit(&self.slots);
    }

    /// Adds a watch. One that starts at or before `processed` must first catch up.
    pub fn add(&mut self, spec: &WatchSpec) {
        let mut watcher = Watcher::new(spec);
        let behind = watcher.next_rev() <= self.processed;
        if !behind {
            watcher.set(flags::SYNCED);
        }
        let slot = self.slots.insert(watcher);
        self.streams.entry(spec.stream).or_default().push(slot);
        if behind {
            self.unsynced.push(slot);
        } else {
            self.synced.insert(&self.slots, slot);
        }
    }

    /// Removes one watch; returns whether it existed.
    pub fn cancel(&mut self, stream: StreamId, watch_id: i64) -> bool {
        let Some(slots) = self.streams.get(&stream) else { return false };
        let found =
            slots.iter().copied().find(|s| self.slots.get(*s).is_some_and(|w| w.watch_id == watch_id));
        let Some(slot) = found else { return false };
        self.remove_slot(slot);
        true
    }

    /// Removes every watch of a stream; returns how many.
    pub fn remove_stream(&mut self, stream: StreamId) -> usize {
        let Some(slots) = self.streams.get(&stream).cloned() else { return 0 };
        for slot in &slots {
            self.remove_slot(*slot);
        }
        self.streams.remove(&stream);
        slots.len()
    }

    fn remove_slot(&mut self, slot: u32) {
        let Some(synced) = self.slots.get(slot).map(|w| w.has(flags::SYNCED)) else { return };
        if synced {
            self.synced.remove(&self.slots, slot);
        }
        let Some(watcher) = self.slots.remove(slot) else { return };
        if !synced {
            if let Some(at) = self.unsynced.iter().position(|s| *s == slot) {
                self.unsynced.swap_remove(at);
            }
        }
        if let Some(list) = self.streams.get_mut(&watcher.stream) {
            list.retain(|s| *s != slot);
            if list.is_empty() {
                self.streams.remove(&watcher.stream);
            }
        }
    }

    fn desync(&mut self, slot: u32, next_rev: i64) {
        let Some(w) = self.slots.get_mut(slot) else { return };
        if !w.has(flags::SYNCED) {
            w.set_next_rev(w.next_rev().min(next_rev));
            return;
        }
        w.set_next_rev(w.next_rev().max(next_rev));
        // Removed from the index while its record still says where it is indexed.
        self.synced.remove(&self.slots, slot);
        if let Some(w) = self.slots.get_mut(slot) {
            w.clear(flags::SYNCED);
        }
        self.unsynced.push(slot);
    }

    fn desync_all(&mut self, from: i64) {
        let synced: Vec<u32> =
            self.slots.iter().filter(|(_, w)| w.has(flags::SYNCED)).map(|(slot, _)| slot).collect();
        for slot in synced {
            self.desync(slot, from);
        }
    }

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
    }

    fn deliver_live(&mut self, events: &[&Event], history: &impl History, outbox: &mut impl Outbox) {
        // stream → responses, and the (slot, revision) of each response for when delivery fails.
        let mut out: HashMap<StreamId, LiveBatch> = HashMap::new();
        let mut start = 0;
        while start < events.len() {
            let rev = revision_of(events[start]);
            let end = start + events[start..].iter().take_while(|e| revision_of(e) == rev).count();
            let mut per_slot: Vec<(u32, Vec<Event>)> = Vec::new();
            let mut prev_cache: HashMap<usize, Option<KeyValue>> = HashMap::new();
            for (i, ev) in events[start..end].iter().enumerate() {
                let mut matched: SmallVec<[u32; 8]> = SmallVec::new();
                self.synced.matches(key_of(ev), |slot| matched.push(slot));
                for slot in matched {
                    let Some(w) = self.slots.get(slot) else { continue };
                    if rev < w.next_rev() || !w.covers(key_of(ev)) || !w.wants(is_delete(ev)) {
                        continue;
                    }
                    let event = if w.has(flags::PREV_KV) {
                        let prev = prev_cache.entry(i).or_insert_with(|| previous(ev, history)).clone();
                        Event { prev_kv: prev, ..(*ev).clone() }
                    } else {
                        (*ev).clone()
                    };
                    match per_slot.iter_mut().find(|(s, _)| *s == slot) {
                        Some((_, list)) => list.push(event),
                        None => per_slot.push((slot, vec![event])),
                    }
                }
            }
            for (slot, evs) in per_slot {
                let Some(w) = self.slots.get_mut(slot) else { continue };
                w.set(flags::NOTIFIED);
                let entry = out.entry(w.stream).or_default();
                entry.0.push(WatchResponse {
                    header: header(rev),
                    watch_id: w.watch_id,
                    events: evs,
                    ..Default::default()
                });
                entry.1.push((slot, rev));
            }
            start = end;
        }
        for (stream, (responses, sent)) in out {
            match outbox.deliver(stream, responses) {
                Delivery::Sent => {
                    for (slot, rev) in sent {
                        if let Some(w) = self.slots.get_mut(slot) {
                            w.set_next_rev(w.next_rev().max(rev + 1));
                        }
                    }
                }
                Delivery::Full => {
                    // The stream missed these: each watcher resumes from its first lost revision.
                    let mut first: HashMap<u32, i64> = HashMap::new();
                    for (slot, rev) in sent {
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

    /// One catch-up pass over the unsynced watchers: cancels those whose history was compacted,
    /// sends the others their next chunks of history, and moves the ones that reach `processed`
    /// into the synced set. Watchers far behind do not hold back those nearer the head: each
    /// chunk is read from the oldest revision still wanted by a watcher not yet served.
    pub fn sync(&mut self, history: &impl History, outbox: &mut impl Outbox, limits: SyncLimits) {
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
        let mut out: HashMap<StreamId, (Vec<WatchResponse>, Vec<u32>)> = HashMap::new();
        let mut prev_cache: HashMap<usize, Option<KeyValue>> = HashMap::new();
        for &slot in slots {
            let Some(w) = self.slots.get(slot) else { continue };
            let mut evs = Vec::new();
            for (i, ev) in chunk.events.iter().enumerate() {
                if revision_of(ev) < w.next_rev() || !w.covers(key_of(ev)) || !w.wants(is_delete(ev)) {
                    continue;
                }
                if w.has(flags::PREV_KV) {
                    let prev = prev_cache.entry(i).or_insert_with(|| previous(ev, history)).clone();
                    evs.push(Event { prev_kv: prev, ..ev.clone() });
                } else {
                    evs.push(ev.clone());
                }
            }
            let entry = out.entry(w.stream).or_default();
            if !evs.is_empty() {
                entry.0.push(WatchResponse {
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

    fn mark_synced(&mut self, slot: u32) {
        let Some(at) = self.unsynced.iter().position(|s| *s == slot) else { return };
        self.unsynced.swap_remove(at);
        let Some(w) = self.slots.get_mut(slot) else { return };
        w.set(flags::SYNCED);
        self.synced.insert(&self.slots, slot);
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
                .map(|w| WatchResponse {
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

    /// Answers a WatchProgressRequest: only when every watcher of the stream is synced, with
    /// watch_id -1 at `processed`, ordered after everything already sent (etcd drops the request
    /// otherwise; the client asks again).
    pub fn request_progress(&mut self, stream: StreamId, outbox: &mut impl Outbox) {
        let Some(slots) = self.streams.get(&stream) else { return };
        let all_synced = slots.iter().all(|s| self.slots.get(*s).is_some_and(|w| w.has(flags::SYNCED)));
        if !all_synced {
            return;
        }
        let progress = WatchResponse { header: header(self.processed), watch_id: -1, ..Default::default() };
        if outbox.deliver(stream, vec![progress]) == Delivery::Closed {
            self.remove_stream(stream);
        }
    }

    /// The periodic progress tick: every synced watcher that asked for progress notifications
    /// and got nothing since the last tick is told the current revision.
    pub fn progress_tick(&mut self, outbox: &mut impl Outbox) {
        let mut out: HashMap<StreamId, Vec<WatchResponse>> = HashMap::new();
        for w in self.slots.iter_mut() {
            let idle = w.has(flags::PROGRESS) && w.has(flags::SYNCED) && !w.has(flags::NOTIFIED);
            w.clear(flags::NOTIFIED);
            if idle {
                out.entry(w.stream).or_default().push(WatchResponse {
                    header: header(self.processed),
                    watch_id: w.watch_id,
                    ..Default::default()
                });
            }
        }
        for (stream, responses) in out {
            if outbox.deliver(stream, responses) == Delivery::Closed {
                self.remove_stream(stream);
            }
        }
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

/// The previous version of an event's key (none for a creation, or if compacted).
fn previous(ev: &Event, history: &impl History) -> Option<KeyValue> {
    let kv = ev.kv.as_ref()?;
    if !is_delete(ev) && kv.version == 1 {
        return None;
    }
    history.get_at(&kv.key, kv.mod_revision - 1).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    use actcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest};

    use crate::store::{Batch, Command, RocksEngine, StoreConfig, StoreCore};

    /// A fake set of stream buffers: each holds at most `capacity` deliveries.
    struct Buffers {
        capacity: usize,
        got: HashMap<StreamId, Vec<Vec<WatchResponse>>>,
    }

    impl Outbox for Buffers {
        fn deliver(&mut self, stream: StreamId, responses: Vec<WatchResponse>) -> Delivery {
            let queue = self.got.entry(stream).or_default();
            if queue.len() >= self.capacity {
                return Delivery::Full;
            }
            queue.push(responses);
            Delivery::Sent
        }
    }

    impl Buffers {
        fn new(capacity: usize) -> Self {
            Self { capacity, got: HashMap::new() }
        }
        /// Drains a stream's buffer: (watch id, revisions of its events) per response.
        fn drain(&mut self, stream: StreamId) -> Vec<(i64, Vec<i64>)> {
            self.got
                .remove(&stream)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .map(|r| (r.watch_id, r.events.iter().map(revision_of).collect()))
                .collect()
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        store: StoreCore<RocksEngine>,
    }

    impl Fixture {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = RocksEngine::open(dir.path()).expect("engine");
            let store = StoreCore::open(engine, StoreConfig::default()).expect("store");
            Self { _dir: dir, store }
        }
        fn commit(&mut self, commands: Vec<Command>) -> CommittedEvents {
            let mut batch = Batch::default();
            for c in &commands {
                self.store.apply(c, &mut batch).expect("apply");
            }
            self.store.commit(batch).expect("commit")
        }
        fn put(&mut self, key: &'static str, value: &'static str) -> CommittedEvents {
            self.commit(vec![put(key, value)])
        }
    }

    fn put(key: &'static str, value: &'static str) -> Command {
        Command::Put(PutRequest {
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::from_static(value.as_bytes()),
            ..Default::default()
        })
    }

    fn spec(stream: StreamId, watch_id: i64, key: &'static str, end: &'static str, start: i64) -> WatchSpec {
        WatchSpec {
            stream,
            watch_id,
            key: Bytes::from_static(key.as_bytes()),
            range_end: Bytes::from_static(end.as_bytes()),
            start_revision: start,
            prev_kv: false,
            no_put: false,
            no_delete: false,
            progress_notify: false,
        }
    }

    #[test]
    fn synced_watchers_get_each_revision_in_its_own_response_with_filters_and_prev_kv() {
        let mut f = Fixture::new();
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        let mut out = Buffers::new(100);
        group.add(&spec(1, 0, "a", "", 2));
        group.add(&WatchSpec { prev_kv: true, no_put: true, ..spec(1, 1, "a", "b", 2) });
        group.add(&spec(2, 0, "\0", "\0", 2));

        let batch = f.commit(vec![put("a", "1"), put("b", "2")]);
        group.on_committed(&batch, &view, &mut out);
        let delete =
            Command::DeleteRange(DeleteRangeRequest { key: Bytes::from_static(b"a"), ..Default::default() });
        let batch = f.commit(vec![delete]);
        group.on_committed(&batch, &view, &mut out);

        assert_eq!(out.drain(1), [(0, vec![2]), (0, vec![4]), (1, vec![4])]);
        assert_eq!(out.drain(2), [(0, vec![2]), (0, vec![3]), (0, vec![4])]);
        let with_prev =
            group.slots.iter().find(|(_, w)| w.stream == 1 && w.watch_id == 1).map(|(_, w)| w.next_rev());
        assert_eq!(with_prev, Some(5));
    }

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

    #[test]
    fn progress_is_answered_only_when_every_watcher_of_the_stream_is_synced() {
        let mut f = Fixture::new();
        f.put("k", "v");
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        let mut out = Buffers::new(10);
        group.add(&spec(1, 0, "k", "", 1));
        group.request_progress(1, &mut out);
        assert!(out.got.is_empty(), "an unsynced watcher holds progress back");
        group.sync(&view, &mut out, SyncLimits::default());
        out.drain(1);
        group.request_progress(1, &mut out);
        assert_eq!(out.drain(1), [(-1, vec![])]);
        group.request_progress(9, &mut out);
        assert!(out.got.is_empty(), "a stream without watchers gets nothing");
    }

    #[test]
    fn a_shard_that_stops_hearing_from_the_store_catches_up_after_two_idle_checks() {
        let mut f = Fixture::new();
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        group.add(&spec(1, 0, "k", "", 2));
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
