//! Finds the synced watchers of a key in O(log n + matches): watchers of single keys in a hash
//! table of slot numbers (4 bytes per watch: the key lives once, in the watch record), watchers
//! of ranges in an [`IntervalTree`].

use std::hash::BuildHasher;

use actcd_proto::key_range::KeyRange;
use hashbrown::{DefaultHashBuilder, HashTable};

use super::interval_tree::{End, IntervalTree};
use super::slab::WatchSlab;

/// The index of a shard's synced watchers. Its methods take the shard's record slab, where
/// each slot's key is read from (the exact-key table stores slot numbers only).
#[derive(Default)]
pub struct RangeIndex {
    hasher: DefaultHashBuilder,
    exact: HashTable<u32>,
    ranges: IntervalTree,
}

fn key_of(slots: &WatchSlab, slot: u32) -> &[u8] {
    slots.get(slot).map_or(&[], |w| w.key())
}

impl RangeIndex {
    /// Indexes watcher `slot` (already in `slots`) under its key or range.
    pub fn insert(&mut self, slots: &WatchSlab, slot: u32) {
        let Some(w) = slots.get(slot) else { return };
        match w.range() {
            KeyRange::Key(key) => {
                let hasher = &self.hasher;
                let hash = hasher.hash_one(key);
                self.exact.insert_unique(hash, slot, |s| hasher.hash_one(key_of(slots, *s)));
            }
            range => self.ranges.insert(range.start(), End::of(range), slot),
        }
    }

    /// Removes watcher `slot` (still in `slots`); returns whether it was there.
    pub fn remove(&mut self, slots: &WatchSlab, slot: u32) -> bool {
        let Some(w) = slots.get(slot) else { return false };
        match w.range() {
            KeyRange::Key(key) => {
                let hash = self.hasher.hash_one(key);
                match self.exact.find_entry(hash, |s| *s == slot) {
                    Ok(entry) => {
                        entry.remove();
                        true
                    }
                    Err(_) => false,
                }
            }
            range => self.ranges.remove(range.start(), &End::of(range), slot),
        }
    }

    /// Calls `visit` with the slot of every watcher whose key or range may cover `key`.
    /// Single-key candidates share the key's hash: the caller checks `Watcher::covers`.
    pub fn matches(&self, key: &[u8], mut visit: impl FnMut(u32)) {
        let hash = self.hasher.hash_one(key);
        self.exact.iter_hash(hash).for_each(|s| visit(*s));
        if !self.ranges.is_empty() {
            self.ranges.stab(key, visit);
        }
    }

    /// Shrinks the exact-key table once it is mostly empty (not sooner: a table shrunk to a
    /// tight fit doubles again at the next few inserts).
    pub fn shrink_to_fit(&mut self, slots: &WatchSlab) {
        if self.exact.len() >= self.exact.capacity() / 4 {
            return;
        }
        let hasher = &self.hasher;
        self.exact.shrink_to_fit(|s| hasher.hash_one(key_of(slots, *s)));
    }

    /// Approximate heap bytes: the hash table's slots and control bytes, tree nodes and bounds.
    pub fn heap_bytes(&self) -> usize {
        self.exact.capacity() * (std::mem::size_of::<u32>() + 1) + self.ranges.len() * 160
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::messages::WatchSpec;
    use crate::watch::watcher::Watcher;
    use bytes::Bytes;

    fn watcher(key: &str, end: &str) -> Watcher {
        Watcher::new(&WatchSpec {
            stream: 1,
            watch_id: 0,
            key: Bytes::copy_from_slice(key.as_bytes()),
            range_end: Bytes::copy_from_slice(end.as_bytes()),
            start_revision: 1,
            prev_kv: false,
            no_put: false,
            no_delete: false,
            progress_notify: false,
        })
    }

    fn slab(watchers: impl IntoIterator<Item = Watcher>) -> WatchSlab {
        let mut slab = WatchSlab::default();
        watchers.into_iter().for_each(|w| {
            slab.insert(w);
        });
        slab
    }

    fn matched(index: &RangeIndex, slots: &WatchSlab, key: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        index.matches(key, |s| {
            if slots.get(s).is_some_and(|w| w.covers(key)) {
                out.push(s)
            }
        });
        out.sort_unstable();
        out
    }

    #[test]
    fn exact_prefix_and_open_ranges_match() {
        let slots = slab([
            watcher("unindexed", ""),
            watcher("a", ""),
            watcher("a", ""),
            watcher("a", "b"),
            watcher("b", "\0"),
            watcher("ab", "ac"),
        ]);
        let mut index = RangeIndex::default();
        for slot in 1..slots.end() {
            index.insert(&slots, slot);
        }
        assert_eq!(matched(&index, &slots, b"a"), [1, 2, 3]);
        assert_eq!(matched(&index, &slots, b"ab"), [3, 5]);
        assert_eq!(matched(&index, &slots, b"b"), [4]);
        assert_eq!(matched(&index, &slots, b"zzz"), [4]);
        assert_eq!(matched(&index, &slots, b"0"), Vec::<u32>::new());
        assert!(index.remove(&slots, 1));
        assert!(!index.remove(&slots, 1));
        assert!(index.remove(&slots, 3));
        assert_eq!(matched(&index, &slots, b"a"), [2]);
        assert_eq!(matched(&index, &slots, b"ab"), [5]);
    }

    #[test]
    fn many_single_key_watchers_survive_table_growth() {
        let slots = slab((0..1000).map(|i| watcher(&format!("k{}", i % 300), "")));
        let mut index = RangeIndex::default();
        for slot in 0..slots.end() {
            index.insert(&slots, slot);
        }
        assert_eq!(matched(&index, &slots, b"k7").len(), 4);
        assert_eq!(matched(&index, &slots, b"k299").len(), 3);
    }
}
