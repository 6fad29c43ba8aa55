//! A shard's watches, [`WatcherGroup`], and the two sets each watcher moves between; what
//! moves it is in [`super::live`], [`super::catch_up`] and [`super::progress`].
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

use actcd_proto::etcdserverpb::ResponseHeader;
use actcd_proto::mvccpb::{event::EventType, Event};

use crate::watch::messages::{StreamId, WatchSpec};
use crate::watch::range_index::RangeIndex;
use crate::watch::slab::WatchSlab;
use crate::watch::watcher::{flags, Watcher};

/// The watches of one shard.
#[derive(Default)]
pub struct WatcherGroup {
    pub(super) slots: WatchSlab,
    pub(super) synced: RangeIndex,
    pub(super) unsynced: Vec<u32>,
    /// Each stream's slots, for cancel and stream removal. Grown by a quarter at a time (see
    /// [`push_slot`]).
    pub(super) streams: HashMap<StreamId, StreamSlots>,
    pub(super) processed: i64,
    /// `processed` at the previous stall check.
    pub(super) processed_at_last_check: i64,
    /// Consecutive stall checks that saw no progress.
    pub(super) stalled_checks: u8,
    /// Streams whose progress request waits until their watchers have caught up (etcd
    /// 3.4.31's deferred progress, etcd issue 17507) and this shard has processed the revision
    /// the store was at when the request came: at most one entry a stream, the latest revision.
    pub(super) deferred_progress: HashMap<StreamId, i64>,
}

/// The slots of one stream's watches: inline up to four, the common case.
pub(super) type StreamSlots = SmallVec<[u32; 4]>;

/// Appends to a stream's slots, growing the list by a quarter rather than doubling it: streams
/// are many and each list is sized by its own watches, so doubling left up to half of every
/// list empty (20 watches held room for 32: ~6 bytes a watch). A quarter costs ~4 copies of
/// each slot over the list's growth, on create only.
fn push_slot(list: &mut StreamSlots, slot: u32) {
    if list.len() == list.capacity() {
        list.reserve_exact((list.len() / 4).max(4));
    }
    list.push(slot);
}

pub(super) fn is_delete(ev: &Event) -> bool {
    ev.r#type == EventType::Delete as i32
}

pub(super) fn revision_of(ev: &Event) -> i64 {
    ev.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

pub(super) fn key_of(ev: &Event) -> &[u8] {
    ev.kv.as_ref().map_or(&[], |kv| kv.key.as_ref())
}

pub(super) fn header(revision: i64) -> Option<ResponseHeader> {
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
        let streams = self.streams.capacity() * (std::mem::size_of::<(StreamId, StreamSlots)>() + 8);
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
        push_slot(self.streams.entry(spec.stream).or_default(), slot);
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
        // Taken out first: remove_slot then has no list of the stream to edit.
        let Some(slots) = self.streams.remove(&stream) else { return 0 };
        for slot in &slots {
            self.remove_slot(*slot);
        }
        self.deferred_progress.remove(&stream);
        slots.len()
    }

    pub(super) fn remove_slot(&mut self, slot: u32) {
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
            } else if list.spilled() && list.len() <= list.capacity() / 2 {
                // Not sooner: a list shrunk to fit would grow again at the next create.
                list.shrink_to_fit();
            }
        }
    }

    pub(super) fn desync(&mut self, slot: u32, next_rev: i64) {
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

    pub(super) fn desync_all(&mut self, from: i64) {
        let synced: Vec<u32> =
            self.slots.iter().filter(|(_, w)| w.has(flags::SYNCED)).map(|(slot, _)| slot).collect();
        for slot in synced {
            self.desync(slot, from);
        }
    }

    pub(super) fn mark_synced(&mut self, slot: u32) {
        let Some(at) = self.unsynced.iter().position(|s| *s == slot) else { return };
        self.unsynced.swap_remove(at);
        let Some(w) = self.slots.get_mut(slot) else { return };
        w.set(flags::SYNCED);
        self.synced.insert(&self.slots, slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_list_grows_by_a_quarter_not_by_doubling() {
        let mut list = StreamSlots::new();
        for (watches, room) in [(4, 4), (8, 8), (20, 20), (100, 112)] {
            while list.len() < watches {
                let slot = list.len() as u32;
                push_slot(&mut list, slot);
            }
            assert_eq!(list.capacity(), room, "room for {watches} watches");
        }
    }
}
