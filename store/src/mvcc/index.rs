//! The in-memory MVCC index: every key's revision history, ordered by key.
//!
//! This plays the part of etcd's `treeIndex`. Values are not held here: a
//! lookup yields the revision whose history record (keyed by
//! [`Revision::to_key_bytes`]) holds the value. Restoring from disk replays
//! the history records in revision order through [`Index::put`] and
//! [`Index::tombstone`].

use std::collections::BTreeSet;
use std::ops::Bound;

use actcd_proto::key_range::KeyRange;

use crate::mvcc::key_index::KeyEntry;
pub use crate::mvcc::key_index::{IndexError, KeyAt};
use crate::mvcc::revision::Revision;

/// Estimated bytes of B-tree nodes per key, for [`Index::heap_bytes`].
///
/// A set element is a 24-byte [`KeyEntry`]. A leaf node holds 11 of them in
/// 280 bytes (a 320-byte allocation under jemalloc) and internal nodes add
/// about a tenth, so a completely full tree costs about 30 bytes per key.
/// Measured with jemalloc: 30 right after [`Index::compact`] rebuilds the
/// tree in bulk, 44 once random inserts have split nodes (about two thirds
/// full), and briefly up to 48 while inserts split the full nodes of a
/// freshly rebuilt tree. We assume 24 bytes at 60% overall use of node
/// memory (fill, node headers, internal nodes and rounding): 24 / 0.6 = 40.
const TREE_BYTES_PER_KEY: usize = 40;

/// The in-memory index of all keys and their revision histories.
#[derive(Debug, Default)]
pub struct Index {
    keys: BTreeSet<KeyEntry>,
    /// Sum of [`KeyEntry::heap_bytes`], kept up to date so that
    /// [`Index::heap_bytes`] does not walk the tree.
    entry_bytes: usize,
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys with at least one stored revision, including keys
    /// that are deleted at the newest revision but not yet compacted away.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the index holds no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Estimated heap bytes held by the index: each key's allocation as
    /// requested (allocator size-class rounding not included) plus
    /// 40 bytes per key for the B-tree nodes (24-byte entries at an
    /// assumed 60% use of node memory).
    pub fn heap_bytes(&self) -> usize {
        self.entry_bytes + self.keys.len() * TREE_BYTES_PER_KEY
    }

    /// The key as of revision `at_rev`, or `None` if it did not exist then.
    ///
    /// `at_rev` must not be older than the last compaction: such reads may
    /// see a key as missing.
    pub fn get(&self, key: &[u8], at_rev: i64) -> Option<KeyAt> {
        self.keys.get(key)?.get(at_rev)
    }

    /// Records a put of `key` at `rev`.
    ///
    /// # Panics
    ///
    /// If [`Index::try_put`] fails, i.e. `rev` is not newer than the key's
    /// newest revision or cannot be packed: both mean the store handed out
    /// a bad revision, and etcd panics here too.
    pub fn put(&mut self, key: &[u8], rev: Revision) {
        if let Err(err) = self.try_put(key, rev) {
            panic!("index put of {:?} at {rev:?}: {err}", key.escape_ascii().to_string());
        }
    }

    /// Records a put of `key` at `rev`, refusing revisions that are not
    /// newer than the key's newest one or that cannot be packed.
    pub fn try_put(&mut self, key: &[u8], rev: Revision) -> Result<(), IndexError> {
        self.append(key, rev, false)
    }

    /// Records the oldest stored put of a key while rebuilding the index from history:
    /// `create` and `version` come from the stored value, so a generation whose start was
    /// compacted away keeps its create revision and version count across a restart.
    /// Later records of the key go through [`Index::try_put`] / [`Index::tombstone`].
    pub fn restore_put(
        &mut self,
        key: &[u8],
        rev: Revision,
        create: Revision,
        version: i64,
    ) -> Result<(), IndexError> {
        if self.keys.contains(key) {
            return self.append(key, rev, false);
        }
        let entry = KeyEntry::restored(key, rev, create, version)?;
        self.entry_bytes += entry.heap_bytes();
        self.keys.insert(entry);
        Ok(())
    }

    /// Records a delete of `key` at `rev`.
    ///
    /// Fails with [`IndexError::RevisionNotFound`] if the key does not exist
    /// at its newest revision, like etcd.
    pub fn tombstone(&mut self, key: &[u8], rev: Revision) -> Result<(), IndexError> {
        self.append(key, rev, true)
    }

    fn append(&mut self, key: &[u8], rev: Revision, tombstone: bool) -> Result<(), IndexError> {
        let Some(old) = self.keys.get(key) else {
            if tombstone {
                return Err(IndexError::RevisionNotFound);
            }
            let entry = KeyEntry::new(key, rev)?;
            self.entry_bytes += entry.heap_bytes();
            self.keys.insert(entry);
            return Ok(());
        };
        let new = old.appended(rev, tombstone)?;
        self.entry_bytes = self.entry_bytes - old.heap_bytes() + new.heap_bytes();
        // Set elements are immutable; replacing swaps in the rebuilt entry
        // without removing and re-inserting it.
        self.keys.replace(new);
        Ok(())
    }

    /// Visits the keys that exist at `at_rev` in the range given by `key`
    /// and `range_end`, in key order, and returns how many there are.
    ///
    /// The range is read by etcd's rule ([`KeyRange`]). At most `limit`
    /// keys are visited (0 = no limit), but the returned count always
    /// covers the whole range, like etcd's `count`.
    pub fn range(
        &self,
        key: &[u8],
        range_end: &[u8],
        at_rev: i64,
        limit: usize,
        mut visit: impl FnMut(&[u8], KeyAt),
    ) -> usize {
        let mut count = 0;
        for (key, found) in self.live(key, range_end, at_rev) {
            count += 1;
            if limit == 0 || count <= limit {
                visit(key, found);
            }
        }
        count
    }

    /// Visits the first `limit` keys (0 = no limit) that exist at `at_rev` in
    /// the range given by `key` and `range_end`, in key order, and returns
    /// whether the range holds more after them.
    ///
    /// Unlike [`Index::range`] it stops at the first key past the limit
    /// instead of counting the rest: a range read page by page then costs
    /// each page once, not the remainder of the range again for every page.
    pub fn page(
        &self,
        key: &[u8],
        range_end: &[u8],
        at_rev: i64,
        limit: usize,
        mut visit: impl FnMut(&[u8], KeyAt),
    ) -> bool {
        let mut live = self.live(key, range_end, at_rev);
        let limit = if limit == 0 { usize::MAX } else { limit };
        for (key, found) in live.by_ref().take(limit) {
            visit(key, found);
        }
        live.next().is_some()
    }

    /// The keys that exist at `at_rev` in the range given by `key` and `range_end` (etcd's
    /// rule, [`KeyRange`]), in key order, each with the revision it has then.
    fn live<'a>(
        &'a self,
        key: &'a [u8],
        range_end: &'a [u8],
        at_rev: i64,
    ) -> impl Iterator<Item = (&'a [u8], KeyAt)> + 'a {
        let range = KeyRange::new(key, range_end);
        let (single, end) = match range {
            KeyRange::Key(key) => (self.get(key, at_rev).map(|found| (key, found)), None),
            KeyRange::From(_) => (None, Some(Bound::Unbounded)),
            // BTreeSet::range panics on an inverted range; etcd returns nothing.
            KeyRange::Between(..) if range.is_empty() => (None, None),
            KeyRange::Between(_, end) => (None, Some(Bound::Excluded(end))),
        };
        let scanned = end
            .map(|end| self.keys.range::<[u8], _>((Bound::Included(key), end)))
            .into_iter()
            .flatten()
            .filter_map(move |entry| entry.get(at_rev).map(|found| (entry.key(), found)));
        single.into_iter().chain(scanned)
    }

    /// Compacts every key at `at_rev` (see [`KeyEntry::compact`]) and
    /// returns the revisions dropped, whose history records the caller
    /// should delete. Keys left without revisions leave the index.
    ///
    /// This rebuilds the B-tree from sorted entries, which also packs its
    /// nodes full: after random inserts they are about two thirds full.
    /// Updates of existing keys keep that density; inserting new keys
    /// splits full nodes in half, and after about 5% more keys the tree is
    /// back at its random-insert size, so rebuilding more often than
    /// compaction does is not worth its pause.
    pub fn compact(&mut self, at_rev: i64) -> Vec<Revision> {
        let mut removed = Vec::new();
        let mut entry_bytes = 0;
        self.keys = std::mem::take(&mut self.keys)
            .into_iter()
            .filter_map(|mut entry| {
                if entry.compact(at_rev, &mut removed) {
                    return None;
                }
                entry_bytes += entry.heap_bytes();
                Some(entry)
            })
            .collect();
        self.entry_bytes = entry_bytes;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    fn collect(
        index: &Index,
        key: &[u8],
        end: &[u8],
        at_rev: i64,
        limit: usize,
    ) -> (Vec<(Vec<u8>, i64)>, usize) {
        let mut seen = Vec::new();
        let count =
            index.range(key, end, at_rev, limit, |k, at| seen.push((k.to_vec(), at.mod_revision.main)));
        (seen, count)
    }

    fn kv(key: &str, main: i64) -> (Vec<u8>, i64) {
        (key.as_bytes().to_vec(), main)
    }

    /// a@2 b@3 c@4 b@5 (delete a)@6 d@7
    fn sample() -> Index {
        let mut index = Index::new();
        index.put(b"a", rev(2));
        index.put(b"b", rev(3));
        index.put(b"c", rev(4));
        index.put(b"b", rev(5));
        index.tombstone(b"a", rev(6)).expect("delete a");
        index.put(b"d", rev(7));
        index
    }

    #[test]
    fn get_through_history() {
        let index = sample();
        assert_eq!(index.len(), 4);
        assert_eq!(index.get(b"a", 1), None);
        assert_eq!(
            index.get(b"b", 5),
            Some(KeyAt { mod_revision: rev(5), create_revision: rev(3), version: 2 })
        );
        assert_eq!(index.get(b"b", 4).map(|k| k.version), Some(1));
        assert_eq!(index.get(b"a", 5).map(|k| k.mod_revision), Some(rev(2)));
        assert_eq!(index.get(b"a", 6), None);
        assert_eq!(index.get(b"zz", 7), None);
    }

    #[test]
    fn tombstone_errors() {
        let mut index = sample();
        assert_eq!(index.tombstone(b"a", rev(8)), Err(IndexError::RevisionNotFound));
        assert_eq!(index.tombstone(b"nope", rev(8)), Err(IndexError::RevisionNotFound));
        assert_eq!(index.tombstone(b"b", rev(5)), Err(IndexError::OutOfOrder { last: rev(5), rev: rev(5) }));
        assert_eq!(index.try_put(b"d", rev(6)), Err(IndexError::OutOfOrder { last: rev(7), rev: rev(6) }));
        assert!(index.try_put(b"new", rev(-3)).is_err());
        assert!(!index.keys.contains(&b"new"[..]));
        index.put(b"a", rev(8));
        assert_eq!(
            index.get(b"a", 8),
            Some(KeyAt { mod_revision: rev(8), create_revision: rev(8), version: 1 })
        );
    }

    #[test]
    #[should_panic(expected = "index put")]
    fn put_panics_on_stale_revision() {
        let mut index = sample();
        index.put(b"b", rev(4));
    }

    /// Pages read one after another, each from just past the last key of
    /// the one before, give what one range gives, and say more exactly when
    /// keys remain.
    #[test]
    fn pages_cover_the_range_and_stop_at_their_limit() {
        let index = sample();
        let page = |key: &[u8], end: &[u8], at: i64, limit| {
            let mut seen = Vec::new();
            let more = index.page(key, end, at, limit, |k, at| seen.push((k.to_vec(), at.mod_revision.main)));
            (seen, more)
        };
        assert_eq!(page(b"a", b"\0", 7, 2), (vec![kv("b", 5), kv("c", 4)], true));
        assert_eq!(page(b"c\0", b"\0", 7, 2), (vec![kv("d", 7)], false));
        assert_eq!(page(b"a", b"d", 7, 2), (vec![kv("b", 5), kv("c", 4)], false));
        assert_eq!(page(b"a", b"\0", 5, 1), (vec![kv("a", 2)], true));
        assert_eq!(page(b"a", b"\0", 7, 0), (collect(&index, b"a", b"\0", 7, 0).0, false));
        assert_eq!(page(b"b", b"", 7, 1), (vec![kv("b", 5)], false));
        assert_eq!(page(b"d", b"a", 7, 1), (vec![], false));
    }

    #[test]
    fn range_end_rules() {
        let index = sample();
        // Empty range_end: the single key.
        assert_eq!(collect(&index, b"b", b"", 7, 0), (vec![kv("b", 5)], 1));
        assert_eq!(collect(&index, b"a", b"", 7, 0), (vec![], 0));
        assert_eq!(collect(&index, b"bb", b"", 7, 0), (vec![], 0));
        // "\0": everything from key on.
        assert_eq!(collect(&index, b"b", b"\0", 7, 0), (vec![kv("b", 5), kv("c", 4), kv("d", 7)], 3));
        assert_eq!(collect(&index, b"", b"\0", 5, 0), (vec![kv("a", 2), kv("b", 5), kv("c", 4)], 3));
        // Half-open interval.
        assert_eq!(collect(&index, b"a", b"c", 7, 0), (vec![kv("b", 5)], 1));
        assert_eq!(collect(&index, b"a", b"c", 4, 0), (vec![kv("a", 2), kv("b", 3)], 2));
        // Inverted or empty intervals.
        assert_eq!(collect(&index, b"c", b"a", 7, 0), (vec![], 0));
        assert_eq!(collect(&index, b"c", b"c", 7, 0), (vec![], 0));
    }

    #[test]
    fn range_limit_counts_everything() {
        let index = sample();
        assert_eq!(collect(&index, b"", b"\0", 7, 2), (vec![kv("b", 5), kv("c", 4)], 3));
        assert_eq!(collect(&index, b"", b"\0", 7, 1), (vec![kv("b", 5)], 3));
        assert_eq!(collect(&index, b"", b"\0", 7, 3).1, 3);
        assert_eq!(collect(&index, b"", b"\0", 7, 9).0.len(), 3);
        assert_eq!(collect(&index, b"b", b"", 7, 1), (vec![kv("b", 5)], 1));
    }

    #[test]
    fn compact_removes_and_reports() {
        let mut index = sample();
        let removed = index.compact(5);
        assert_eq!(removed, [rev(3)]);
        assert_eq!(index.len(), 4);
        // b@5's create revision was 3, whose record is gone.
        assert_eq!(
            index.get(b"b", 5),
            Some(KeyAt { mod_revision: rev(5), create_revision: rev(3), version: 2 })
        );
        // a's tombstone sits at 6 > 5: a is still readable at 5.
        assert_eq!(index.get(b"a", 5).map(|k| k.mod_revision), Some(rev(2)));

        let removed = index.compact(6);
        assert_eq!(removed, [rev(2)], "tombstone at 6 kept");
        assert_eq!(index.len(), 4);
        let removed = index.compact(7);
        assert_eq!(removed, [rev(6)], "tombstone below 7 dropped");
        assert_eq!(index.len(), 3);
        assert_eq!(collect(&index, b"", b"\0", 7, 0), (vec![kv("b", 5), kv("c", 4), kv("d", 7)], 3));
        assert_eq!(index.tombstone(b"a", rev(8)), Err(IndexError::RevisionNotFound));
    }

    #[test]
    fn heap_bytes_tracks_entries() {
        let mut index = Index::new();
        assert!(index.is_empty());
        assert_eq!(index.heap_bytes(), 0);
        index.put(b"key", rev(2));
        // One revision: the allocation is just the key.
        assert_eq!(index.heap_bytes(), 3 + TREE_BYTES_PER_KEY);
        index.put(b"key", rev(3));
        assert_eq!(index.heap_bytes(), 3 + 16 + TREE_BYTES_PER_KEY);
        index.tombstone(b"key", rev(4)).expect("delete");
        index.compact(5);
        assert_eq!(index.heap_bytes(), 0);
        assert!(index.is_empty());
    }

    // ---- model-based test -------------------------------------------------

    const KEYS: [&[u8]; 6] = [b"\0", b"a", b"a\0", b"ab", b"b", b"\xff"];

    #[derive(Clone, Debug)]
    enum Step {
        /// One transaction: changes to distinct keys (true = delete).
        Txn(Vec<(usize, bool)>),
        /// Compact at a point between the last compaction and now.
        Compact(u8),
        /// Check get of a key at a point between the last compaction and now.
        Get(usize, u8),
        /// Check a range: start, end (index past KEYS: "" or "\0"), point,
        /// limit.
        Range(usize, usize, u8, usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        let key = 0..KEYS.len();
        prop_oneof![
            6 => prop::collection::btree_map(key.clone(), any::<bool>(), 1..4)
                .prop_map(|m| Step::Txn(m.into_iter().collect())),
            1 => any::<u8>().prop_map(Step::Compact),
            2 => (key.clone(), any::<u8>()).prop_map(|(k, p)| Step::Get(k, p)),
            2 => (0..KEYS.len() + 1, 0..KEYS.len() + 2, any::<u8>(), 0..4usize)
                .prop_map(|(k, e, p, l)| Step::Range(k, e, p, l)),
        ]
    }

    /// Full, never compacted history: reads at or after the compaction
    /// revision must agree with it.
    #[derive(Default)]
    struct Model {
        history: BTreeMap<Vec<u8>, Vec<(Revision, bool)>>,
        compacted: i64,
        current: i64,
    }

    impl Model {
        fn point(&self, p: u8) -> i64 {
            let lo = self.compacted.max(1);
            lo + i64::from(p) % (self.current - lo + 1)
        }

        fn get(&self, key: &[u8], at_rev: i64) -> Option<KeyAt> {
            let revs = self.history.get(key)?;
            let idx = revs.iter().rposition(|(r, _)| r.main <= at_rev)?;
            if revs[idx].1 {
                return None;
            }
            let start = revs[..idx].iter().rposition(|(_, t)| *t).map_or(0, |i| i + 1);
            Some(KeyAt {
                mod_revision: revs[idx].0,
                create_revision: revs[start].0,
                version: (idx - start + 1) as i64,
            })
        }

        /// What compaction at `c` leaves of one key's history.
        fn retained(revs: &[(Revision, bool)], c: i64) -> &[(Revision, bool)] {
            match revs.iter().rposition(|(r, _)| r.main <= c) {
                None => revs,
                Some(i) if revs[i].1 && revs[i].0.main < c => &revs[i + 1..],
                Some(i) => &revs[i..],
            }
        }

        fn all_retained(&self) -> BTreeMap<Vec<u8>, Vec<(Revision, bool)>> {
            self.history
                .iter()
                .map(|(k, revs)| (k.clone(), Self::retained(revs, self.compacted).to_vec()))
                .filter(|(_, revs)| !revs.is_empty())
                .collect()
        }
    }

    fn index_contents(index: &Index) -> BTreeMap<Vec<u8>, Vec<(Revision, bool)>> {
        index.keys.iter().map(|e| (e.key().to_vec(), e.revisions().collect())).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn matches_model(steps in prop::collection::vec(step(), 1..60)) {
            let mut index = Index::new();
            let mut model = Model { current: 1, ..Model::default() };
            for step in steps {
                match step {
                    Step::Txn(changes) => {
                        model.current += 1;
                        for (sub, (k, delete)) in changes.into_iter().enumerate() {
                            let key = KEYS[k];
                            let r = Revision::new(model.current, sub as i64);
                            let live = model.history.get(key).and_then(|h| h.last()).is_some_and(|(_, t)| !t);
                            if delete {
                                let got = index.tombstone(key, r);
                                if live {
                                    prop_assert_eq!(got, Ok(()));
                                } else {
                                    prop_assert_eq!(got, Err(IndexError::RevisionNotFound));
                                    continue;
                                }
                            } else {
                                index.put(key, r);
                            }
                            model.history.entry(key.to_vec()).or_default().push((r, delete));
                        }
                    }
                    Step::Compact(p) => {
                        let before = model.all_retained();
                        let c = model.point(p);
                        model.compacted = c;
                        let after = model.all_retained();
                        let mut expected: Vec<Revision> = before
                            .iter()
                            .flat_map(|(k, revs)| {
                                let kept = after.get(k).cloned().unwrap_or_default();
                                revs.iter().filter(move |r| !kept.contains(r)).map(|(r, _)| *r).collect::<Vec<_>>()
                            })
                            .collect();
                        let mut removed = index.compact(c);
                        expected.sort();
                        removed.sort();
                        prop_assert_eq!(removed, expected);
                        prop_assert_eq!(index_contents(&index), after);
                        let bytes: usize = index.keys.iter().map(KeyEntry::heap_bytes).sum();
                        prop_assert_eq!(index.entry_bytes, bytes);
                    }
                    Step::Get(k, p) => {
                        let at_rev = model.point(p);
                        prop_assert_eq!(index.get(KEYS[k], at_rev), model.get(KEYS[k], at_rev), "at {}", at_rev);
                    }
                    Step::Range(k, e, p, limit) => {
                        let at_rev = model.point(p);
                        let start: &[u8] = KEYS.get(k).copied().unwrap_or(b"");
                        let end: &[u8] = match e {
                            e if e < KEYS.len() => KEYS[e],
                            e if e == KEYS.len() => b"",
                            _ => b"\0",
                        };
                        let in_range = |key: &[u8]| KeyRange::new(start, end).contains(key);
                        let live: Vec<(Vec<u8>, KeyAt)> = model
                            .history
                            .keys()
                            .filter(|key| in_range(key))
                            .filter_map(|key| Some((key.clone(), model.get(key, at_rev)?)))
                            .collect();
                        let mut seen = Vec::new();
                        let count = index.range(start, end, at_rev, limit, |key, at| seen.push((key.to_vec(), at)));
                        prop_assert_eq!(count, live.len());
                        let wanted = if limit == 0 { live.len() } else { limit.min(live.len()) };
                        prop_assert_eq!(&seen[..], &live[..wanted]);
                    }
                }
            }
            prop_assert_eq!(index_contents(&index), model.all_retained());
        }
    }
}
