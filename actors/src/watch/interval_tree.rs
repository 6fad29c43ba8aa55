//! The ranges of range watchers, for point queries: which ranges contain this key? A treap
//! (a binary search tree ordered by (start, end), balanced by priorities drawn from a hash of
//! the range) whose nodes also record the largest end below them, so that a query skips every
//! subtree whose ranges all end at or before the key and every right subtree whose ranges all
//! start after it: O(log n + matches), never a walk over all ranges.

use std::cmp::Ordering;
use std::hash::{DefaultHasher, Hash, Hasher};

use actcd_proto::key_range::KeyRange;
use smallvec::SmallVec;

/// Slots of the watchers sharing one range (most ranges have one or two watchers).
pub type Slots = SmallVec<[u32; 2]>;

/// A range end: a key, or past every key (etcd's "\0" range end).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum End {
    /// Exclusive end key.
    Key(Box<[u8]>),
    /// No end.
    Infinity,
}

impl End {
    /// Where `range` ends. A single key `k` is the range `[k, k\0)`.
    pub fn of(range: KeyRange<'_>) -> Self {
        match range {
            KeyRange::Key(key) => End::Key([key, &[0]].concat().into()),
            KeyRange::From(_) => End::Infinity,
            KeyRange::Between(_, end) => End::Key(end.into()),
        }
    }

    fn after(&self, key: &[u8]) -> bool {
        match self {
            End::Key(end) => &**end > key,
            End::Infinity => true,
        }
    }
}

#[derive(Debug)]
struct Node {
    start: Box<[u8]>,
    end: End,
    slots: Slots,
    /// The largest end in this subtree.
    max_end: End,
    priority: u64,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

type Link = Option<Box<Node>>;

impl Node {
    fn order(&self, start: &[u8], end: &End) -> Ordering {
        (&*self.start, &self.end).cmp(&(start, end))
    }

    fn fix(&mut self) {
        let mut max = self.end.clone();
        for child in [&self.left, &self.right].into_iter().flatten() {
            if child.max_end > max {
                max = child.max_end.clone();
            }
        }
        self.max_end = max;
    }
}

/// Splits `t` into the ranges ordered before (start, end) and those at or after it (or, with
/// `inclusive`, at or before and after).
fn split(t: Link, start: &[u8], end: &End, inclusive: bool) -> (Link, Link) {
    let Some(mut node) = t else { return (None, None) };
    let goes_left = match node.order(start, end) {
        Ordering::Less => true,
        Ordering::Equal => inclusive,
        Ordering::Greater => false,
    };
    if goes_left {
        let (l, r) = split(node.right.take(), start, end, inclusive);
        node.right = l;
        node.fix();
        (Some(node), r)
    } else {
        let (l, r) = split(node.left.take(), start, end, inclusive);
        node.left = r;
        node.fix();
        (l, Some(node))
    }
}

/// Joins two treaps where every range of `a` is ordered before every range of `b`.
fn merge(a: Link, b: Link) -> Link {
    match (a, b) {
        (None, b) => b,
        (a, None) => a,
        (Some(mut a), Some(mut b)) => {
            if a.priority >= b.priority {
                a.right = merge(a.right.take(), Some(b));
                a.fix();
                Some(a)
            } else {
                b.left = merge(Some(a), b.left.take());
                b.fix();
                Some(b)
            }
        }
    }
}

fn find_mut<'a>(mut t: &'a mut Link, start: &[u8], end: &End) -> Option<&'a mut Node> {
    while let Some(node) = t {
        match node.order(start, end) {
            Ordering::Equal => return Some(node),
            Ordering::Less => t = &mut node.right,
            Ordering::Greater => t = &mut node.left,
        }
    }
    None
}

fn stab(t: &Link, key: &[u8], visit: &mut impl FnMut(u32)) {
    let Some(node) = t else { return };
    // Everything below ends at or before the key.
    if !node.max_end.after(key) {
        return;
    }
    stab(&node.left, key, visit);
    if &*node.start <= key {
        if node.end.after(key) {
            node.slots.iter().for_each(|s| visit(*s));
        }
        stab(&node.right, key, visit);
    }
}

/// The ranges, each with the slots of its watchers.
#[derive(Debug, Default)]
pub struct IntervalTree {
    root: Link,
    ranges: usize,
}

impl IntervalTree {
    /// Adds `slot` to the range [start, end).
    pub fn insert(&mut self, start: &[u8], end: End, slot: u32) {
        if let Some(node) = find_mut(&mut self.root, start, &end) {
            node.slots.push(slot);
            return;
        }
        let mut hasher = DefaultHasher::new();
        (start, &end).hash(&mut hasher);
        let node = Box::new(Node {
            start: start.into(),
            max_end: end.clone(),
            end: end.clone(),
            slots: SmallVec::from_slice(&[slot]),
            priority: hasher.finish(),
            left: None,
            right: None,
        });
        let (before, after) = split(self.root.take(), start, &end, false);
        self.root = merge(merge(before, Some(node)), after);
        self.ranges += 1;
    }

    /// Removes `slot` from the range [start, end); returns whether it was there.
    pub fn remove(&mut self, start: &[u8], end: &End, slot: u32) -> bool {
        let Some(node) = find_mut(&mut self.root, start, end) else { return false };
        let Some(at) = node.slots.iter().position(|s| *s == slot) else { return false };
        node.slots.swap_remove(at);
        if node.slots.is_empty() {
            let (before, rest) = split(self.root.take(), start, end, false);
            let (_gone, after) = split(rest, start, end, true);
            self.root = merge(before, after);
            self.ranges -= 1;
        }
        true
    }

    /// Calls `visit` with the slot of every watcher whose range contains `key`.
    pub fn stab(&self, key: &[u8], mut visit: impl FnMut(u32)) {
        stab(&self.root, key, &mut visit);
    }

    /// Distinct ranges held.
    pub fn len(&self) -> usize {
        self.ranges
    }

    /// True when no range is held.
    pub fn is_empty(&self) -> bool {
        self.ranges == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn end(e: &[u8]) -> End {
        End::of(KeyRange::new(b"", e))
    }

    proptest! {
        #[test]
        fn stabbing_matches_a_linear_scan(
            ops in proptest::collection::vec((any::<bool>(), 0u8..12, 0u8..12, 0u32..6, any::<bool>()), 1..200),
            probes in proptest::collection::vec(0u8..14, 1..20),
        ) {
            let mut tree = IntervalTree::default();
            let mut model: Vec<(Vec<u8>, End, u32)> = Vec::new();
            for (add, a, b, slot, open) in ops {
                let (s, e) = (vec![b'a' + a.min(b)], if open { End::Infinity } else { End::Key(vec![b'a' + a.max(b) + 1].into()) });
                if add {
                    tree.insert(&s, e.clone(), slot);
                    model.push((s, e, slot));
                } else {
                    let removed = tree.remove(&s, &e, slot);
                    let at = model.iter().position(|(ms, me, msl)| *ms == s && *me == e && *msl == slot);
                    prop_assert_eq!(removed, at.is_some());
                    if let Some(at) = at {
                        model.swap_remove(at);
                    }
                }
            }
            for p in probes {
                let key = [b'a' + p];
                let mut got = Vec::new();
                tree.stab(&key, |s| got.push(s));
                got.sort_unstable();
                let mut want: Vec<u32> = model.iter().filter(|(s, e, _)| s[..] <= key[..] && e.after(&key)).map(|m| m.2).collect();
                want.sort_unstable();
                prop_assert_eq!(got, want);
            }
            let distinct: std::collections::HashSet<(Vec<u8>, End)> = model.iter().map(|(s, e, _)| (s.clone(), e.clone())).collect();
            prop_assert_eq!(tree.len(), distinct.len());
        }
    }

    #[test]
    fn open_ends_and_exact_bounds() {
        let mut t = IntervalTree::default();
        t.insert(b"b", end(b"d"), 1);
        t.insert(b"c", end(b"\0"), 2);
        let hits = |t: &IntervalTree, k: &[u8]| {
            let mut v = Vec::new();
            t.stab(k, |s| v.push(s));
            v.sort_unstable();
            v
        };
        assert_eq!(hits(&t, b"a"), Vec::<u32>::new());
        assert_eq!(hits(&t, b"b"), [1]);
        assert_eq!(hits(&t, b"c"), [1, 2]);
        assert_eq!(hits(&t, b"d"), [2]);
        assert!(t.remove(b"b", &end(b"d"), 1));
        assert_eq!(hits(&t, b"c"), [2]);
        assert_eq!(t.len(), 1);
    }
}
