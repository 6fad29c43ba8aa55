//! Finds the synced watchers of a key in O(log n + matches): watchers of one key in a hash map,
//! watchers of ranges in an interval tree, both holding slot numbers of the shard's records.

use std::collections::HashMap;
use std::ops::Range;

use interavl::IntervalTree;
use smallvec::SmallVec;

/// Slots of the watchers sharing one key or one range; most keys have one or two watchers,
/// which fit inline without a heap allocation.
type Slots = SmallVec<[u32; 2]>;

/// A range bound: a key, or past every key (etcd's "\0" range end).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Bound {
    Key(Box<[u8]>),
    Infinity,
}

/// The index of a shard's synced watchers.
#[derive(Default)]
pub struct RangeIndex {
    exact: HashMap<Box<[u8]>, Slots>,
    ranges: IntervalTree<Bound, Slots>,
    range_count: usize,
}

fn interval(key: &[u8], range_end: &[u8]) -> Range<Bound> {
    let end = match range_end {
        [0] => Bound::Infinity,
        end => Bound::Key(end.into()),
    };
    Bound::Key(key.into())..end
}

impl RangeIndex {
    /// Indexes watcher `slot` for `key` / `range_end` (etcd's range_end rules).
    pub fn insert(&mut self, key: &[u8], range_end: &[u8], slot: u32) {
        if range_end.is_empty() {
            self.exact.entry(key.into()).or_default().push(slot);
        } else {
            let range = interval(key, range_end);
            match self.ranges.get_mut(&range) {
                Some(slots) => slots.push(slot),
                None => {
                    self.ranges.insert(range, SmallVec::from_slice(&[slot]));
                }
            }
            self.range_count += 1;
        }
    }

    /// Removes watcher `slot`; returns whether it was there.
    pub fn remove(&mut self, key: &[u8], range_end: &[u8], slot: u32) -> bool {
        if range_end.is_empty() {
            let Some(slots) = self.exact.get_mut(key) else { return false };
            let Some(at) = slots.iter().position(|s| *s == slot) else { return false };
            slots.swap_remove(at);
            if slots.is_empty() {
                self.exact.remove(key);
            }
            true
        } else {
            let range = interval(key, range_end);
            let Some(slots) = self.ranges.get_mut(&range) else { return false };
            let Some(at) = slots.iter().position(|s| *s == slot) else { return false };
            slots.swap_remove(at);
            if slots.is_empty() {
                self.ranges.remove(&range);
            }
            self.range_count -= 1;
            true
        }
    }

    /// Calls `visit` with the slot of every watcher whose key or range covers `key`.
    pub fn matches(&self, key: &[u8], mut visit: impl FnMut(u32)) {
        if let Some(slots) = self.exact.get(key) {
            slots.iter().for_each(|s| visit(*s));
        }
        if self.range_count == 0 {
            return;
        }
        // The point `key` as the half-open interval [key, key + "\0").
        let mut after = Vec::with_capacity(key.len() + 1);
        after.extend_from_slice(key);
        after.push(0);
        let point = Bound::Key(key.into())..Bound::Key(after.into_boxed_slice());
        for (_, slots) in self.ranges.iter_overlaps(&point) {
            slots.iter().for_each(|s| visit(*s));
        }
    }

    /// Approximate heap bytes: map entries and keys, tree nodes and bounds.
    pub fn heap_bytes(&self) -> usize {
        let exact: usize =
            self.exact.keys().map(|k| k.len() + std::mem::size_of::<(Box<[u8]>, Slots)>() + 8).sum();
        exact + self.range_count * 160
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(index: &RangeIndex, key: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        index.matches(key, |s| out.push(s));
        out.sort_unstable();
        out
    }

    #[test]
    fn exact_prefix_and_open_ranges_match() {
        let mut index = RangeIndex::default();
        index.insert(b"a", b"", 1);
        index.insert(b"a", b"", 2);
        index.insert(b"a", b"b", 3);
        index.insert(b"b", b"\0", 4);
        index.insert(b"ab", b"ac", 5);
        assert_eq!(matched(&index, b"a"), [1, 2, 3]);
        assert_eq!(matched(&index, b"ab"), [3, 5]);
        assert_eq!(matched(&index, b"b"), [4]);
        assert_eq!(matched(&index, b"zzz"), [4]);
        assert_eq!(matched(&index, b"0"), Vec::<u32>::new());
        assert!(index.remove(b"a", b"", 1));
        assert!(!index.remove(b"a", b"", 1));
        assert!(index.remove(b"a", b"b", 3));
        assert_eq!(matched(&index, b"a"), [2]);
        assert_eq!(matched(&index, b"ab"), [5]);
    }
}
