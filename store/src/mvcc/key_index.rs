//! The revision history of one key, in a single heap allocation.
//!
//! This follows etcd's `keyIndex`. A key's life is a sequence of
//! *generations*: a put into a deleted (or never written) key opens one, each
//! further put appends to it, and a delete appends a tombstone that closes
//! it. The version of a revision is its 1-based position in its generation
//! and the create revision is the generation's first revision.
//!
//! # Worked example
//!
//! etcd's own example, in its numbering: `put@1 put@2 delete@3 put@4
//! delete@5` on one key gives
//!
//! ```text
//! generation 0:  1 ── 2 ── 3(t)     puts are versions 1 and 2
//! generation 1:  4 ── 5(t)          version 1 again after the delete
//! generation 2:  (open, empty)      the next put lands here as version 1
//! ```
//!
//! Reading at revision `r` takes the newest revision with `main <= r`:
//! `get(2)` is `{mod 2, create 1, version 2}`, `get(3)` finds the tombstone
//! so the key does not exist, `get(4)` is `{mod 4, create 4, version 1}`,
//! and `get(0)` finds nothing.
//!
//! Compacting at `c` keeps whatever a read at `c` or later can reach: the
//! newest revision `<= c` and everything after it. Applied to the history
//! above:
//!
//! ```text
//! compact(2):  2 ── 3(t) │ 4 ── 5(t)   1 is gone; reads at 2 still report
//!                                      create 1 and version 2
//! compact(4):  4 ── 5(t)               generation 0 closed before 4: gone
//! compact(5):  5(t)                    a tombstone AT the compaction
//!                                      revision stays until the next one
//! compact(6):  (nothing)               the key leaves the index
//! ```
//!
//! The tombstone at exactly `c` survives because a watcher may start at the
//! compaction revision itself and must still be told about that delete.
//!
//! # Layout
//!
//! Generations are not stored: a tombstone flag marks where each one ends.
//! An entry is 24 bytes in the tree, a boxed byte slice and one word, and
//! owns exactly one heap allocation. Packed revisions never set bit 63 (see
//! [`crate::mvcc::revision`]), so that bit of the word tells the two shapes apart:
//!
//! ```text
//! one revision, no head (word bit 63 clear):
//!   data = [key bytes]                  nothing else: a 64- or 256-byte key
//!   word = the packed revision          is an exact allocator size class
//!
//! otherwise (word bit 63 set):
//!   data = [key bytes][head?][rev 0][rev 1]…[rev n-1]
//!                             └ packed u64 LE each, ascending ┘
//!   word = 1 │ 0… │ head length: 5 bits at 32 │ n: 31 bits at 0
//!   head = created (packed u64 LE) ++ dropped (LEB128)
//! ```
//!
//! The key always starts the allocation, and its length is the slice length
//! minus what the word says follows it, so a key comparison, the hot path of
//! every tree search, reads only the word and the key bytes. In the example
//! above, `put@1` makes `{ data: "foo", word: pack(1) }`; `put@2` turns it
//! into `{ data: "foo" ++ pack(1) ++ pack(2), word: 1 << 63 | 2 }`.
//!
//! Compaction can cut off the start of the oldest generation, losing the
//! revisions its create revision and versions were derived from. The head
//! remembers them: `created` is that generation's create revision and
//! `dropped` how many of its revisions are gone. Only entries with such a
//! cut generation pay for a head (9 to 18 bytes); compaction that leaves one
//! revision and no head returns the entry to the first shape.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;

use crate::mvcc::revision::{Revision, RevisionError};

const REV_LEN: usize = 8;
const CREATED_LEN: usize = 8;
/// Set in [`KeyEntry::word`] when it holds metadata rather than the one
/// packed revision; [`Revision::pack`] never sets it.
const LIST_FLAG: u64 = 1 << 63;
/// The revision count: the low 31 bits of a metadata word.
const COUNT_MASK: u64 = (1 << 31) - 1;
/// Where a metadata word keeps the head's length in bytes (0 or 9 to 18).
const HEAD_SHIFT: u32 = 32;
const HEAD_MASK: u64 = 0x1f;
const MAX_REVISIONS: usize = COUNT_MASK as usize;

/// What a key looked like at some revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAt {
    /// The revision that wrote the value visible at the requested revision;
    /// its history record holds the value.
    pub mod_revision: Revision,
    /// The first revision of the key's current generation.
    pub create_revision: Revision,
    /// How many times the key was written in this generation, counting the
    /// creating put as 1.
    pub version: i64,
}

/// Why the index refused a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexError {
    /// A delete of a key that does not exist at the newest revision
    /// (etcd's `ErrRevisionNotFound`).
    RevisionNotFound,
    /// Revisions of a key must strictly increase.
    OutOfOrder {
        /// The newest revision the key already has.
        last: Revision,
        /// The rejected revision.
        rev: Revision,
    },
    /// The revision does not fit the packed form.
    Revision(RevisionError),
    /// The key already holds the maximum number of uncompacted revisions
    /// (2^31 - 1).
    TooManyRevisions,
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RevisionNotFound => f.write_str(actcd_proto::errors::mvcc::REVISION_NOT_FOUND),
            Self::OutOfOrder { last, rev } => write!(
                f,
                "revision {}.{} is not after the key's newest revision {}.{}",
                rev.main, rev.sub, last.main, last.sub
            ),
            Self::Revision(err) => err.fmt(f),
            Self::TooManyRevisions => f.write_str("too many uncompacted revisions for one key"),
        }
    }
}

impl std::error::Error for IndexError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Revision(err) => Some(err),
            _ => None,
        }
    }
}

impl From<RevisionError> for IndexError {
    fn from(err: RevisionError) -> Self {
        Self::Revision(err)
    }
}

/// The start of a generation whose first revisions were compacted away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    /// Packed create revision of the oldest stored generation.
    created: u64,
    /// How many revisions of that generation are no longer stored.
    dropped: u64,
}

/// One key and its revision history; see the [module docs](self).
///
/// Ordered and compared by key bytes alone, and borrowable as `[u8]`, so a
/// `BTreeSet<KeyEntry>` can be searched with a plain key.
#[derive(Clone)]
pub struct KeyEntry {
    /// The key bytes, followed by the head and revisions when `word` has
    /// [`LIST_FLAG`] set.
    data: Box<[u8]>,
    /// The only revision (packed) or, with [`LIST_FLAG`], the revision count
    /// and head length.
    word: u64,
}

impl KeyEntry {
    /// A key whose first revision is a put at `rev`.
    pub fn new(key: &[u8], rev: Revision) -> Result<Self, IndexError> {
        let packed = rev.pack(false)?;
        Ok(Self { data: key.into(), word: packed })
    }

    /// A key whose oldest stored revision is a put at `rev` that was version `version` of a
    /// generation created at `created`: what a restart finds after a compaction cut the
    /// generation's start (the stored value still carries its create revision and version).
    pub fn restored(key: &[u8], rev: Revision, created: Revision, version: i64) -> Result<Self, IndexError> {
        let packed = rev.pack(false)?;
        let dropped = u64::try_from(version.saturating_sub(1)).unwrap_or(0);
        if dropped == 0 {
            return Self::build(None, key, &[], &[packed]);
        }
        let head = Head { created: created.pack(false)?, dropped };
        Self::build(Some(head), key, &[], &[packed])
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.data[..self.key_len()]
    }

    /// How many revisions are stored.
    pub fn len(&self) -> usize {
        if self.word & LIST_FLAG == 0 {
            1
        } else {
            (self.word & COUNT_MASK) as usize
        }
    }

    /// Whether no revision is stored; compaction leaves entries like this,
    /// and the index drops them.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stored revisions, oldest first, each with its tombstone flag.
    pub fn revisions(&self) -> impl DoubleEndedIterator<Item = (Revision, bool)> + ExactSizeIterator + '_ {
        (0..self.len()).map(|idx| Revision::unpack(self.packed(idx)))
    }

    /// The newest revision and whether it is a tombstone.
    pub fn newest(&self) -> Option<(Revision, bool)> {
        self.revisions().next_back()
    }

    /// Bytes held on the heap by this entry (excluding allocator rounding);
    /// the 24 bytes of the entry itself live in the tree's nodes.
    pub fn heap_bytes(&self) -> usize {
        self.data.len()
    }

    /// The key as of revision `at_rev`, or `None` if it did not exist then.
    ///
    /// Revisions older than the last compaction may be gone, so only ask
    /// about `at_rev` at or after it.
    pub fn get(&self, at_rev: i64) -> Option<KeyAt> {
        let visible = self.count_at_or_before(at_rev);
        let idx = visible.checked_sub(1)?;
        let (mod_revision, tombstone) = Revision::unpack(self.packed(idx));
        if tombstone {
            return None;
        }
        // Generations are implicit: this one began after the closest earlier
        // tombstone.
        let start = (0..idx).rev().find(|&i| self.is_tombstone(i)).map_or(0, |i| i + 1);
        let stored = position_to_version(idx - start + 1);
        let (create_packed, version) = match self.head() {
            Some(head) if start == 0 => {
                (head.created, stored.saturating_add(i64::try_from(head.dropped).unwrap_or(i64::MAX)))
            }
            _ => (self.packed(start), stored),
        };
        Some(KeyAt { mod_revision, create_revision: Revision::unpack(create_packed).0, version })
    }

    /// Records a put at `rev`.
    pub fn put(&mut self, rev: Revision) -> Result<(), IndexError> {
        *self = self.appended(rev, false)?;
        Ok(())
    }

    /// Records a delete at `rev`, closing the current generation.
    pub fn tombstone(&mut self, rev: Revision) -> Result<(), IndexError> {
        *self = self.appended(rev, true)?;
        Ok(())
    }

    /// A copy of this entry with one more revision. The index cannot mutate
    /// entries inside its set, so it swaps in the copy instead.
    pub(crate) fn appended(&self, rev: Revision, tombstone: bool) -> Result<Self, IndexError> {
        let newest = self.newest();
        if tombstone && newest.is_none_or(|(_, dead)| dead) {
            return Err(IndexError::RevisionNotFound);
        }
        if let Some((last, _)) = newest {
            if rev <= last {
                return Err(IndexError::OutOfOrder { last, rev });
            }
        }
        let packed = rev.pack(tombstone)?;
        match self.single() {
            Some(only) => Self::build(None, self.key(), &[], &[only, packed]),
            None => Self::build(self.head(), self.key(), self.list_bytes(), &[packed]),
        }
    }

    /// Drops the revisions that no read at `at_rev` or later can reach,
    /// appending them to `removed` oldest first. Returns true when nothing
    /// is left, meaning the key should leave the index.
    pub fn compact(&mut self, at_rev: i64, removed: &mut Vec<Revision>) -> bool {
        let n = self.len();
        let visible = self.count_at_or_before(at_rev);
        // Generations closed before at_rev are unreachable; `start` is where
        // the first surviving one begins.
        let start = (0..visible)
            .rev()
            .find(|&i| {
                let (rev, tombstone) = Revision::unpack(self.packed(i));
                tombstone && rev.main < at_rev
            })
            .map_or(0, |i| i + 1);
        // Within it, keep from the newest revision <= at_rev. Looking only up
        // to its closing tombstone matters when one main revision holds
        // several changes of the key: etcd keeps that tombstone too.
        let gen_end = (start..n).find(|&i| self.is_tombstone(i)).map_or(n, |i| i + 1);
        let reachable = visible.min(gen_end);
        let cut = if reachable > start { reachable - 1 } else { start };
        if cut == 0 {
            return n == 0;
        }
        removed.extend(self.revisions().take(cut).map(|(rev, _)| rev));
        // No head is needed when the oldest surviving generation is whole
        // (cut == start) or starts with its tombstone, whose version and
        // create revision are never read.
        let head = if cut == n || cut == start || self.is_tombstone(cut) {
            None
        } else {
            let inherited = self.head().filter(|_| start == 0);
            Some(Head {
                created: inherited.map_or(self.packed(start), |h| h.created),
                dropped: inherited.map_or(0, |h| h.dropped) + (cut - start) as u64,
            })
        };
        // A single revision is either kept whole (cut == 0, handled above)
        // or dropped (cut == n == 1); only lists keep part of themselves.
        let kept = self.list_bytes().get(cut * REV_LEN..).unwrap_or_default();
        // Fewer revisions than before, so the count cannot overflow.
        if let Ok(entry) = Self::build(head, self.key(), kept, &[]) {
            *self = entry;
        }
        cut == n
    }

    /// Lays out a fresh entry holding `stored` (revisions in their stored
    /// encoding, packed u64 LE) followed by `extra`.
    fn build(head: Option<Head>, key: &[u8], stored: &[u8], extra: &[u64]) -> Result<Self, IndexError> {
        let count = stored.len() / REV_LEN + extra.len();
        if count > MAX_REVISIONS {
            return Err(IndexError::TooManyRevisions);
        }
        if head.is_none() && count == 1 {
            let word = match extra.first() {
                Some(&packed) => packed,
                None => read_u64(stored),
            };
            return Ok(Self { data: key.into(), word });
        }
        let head_len = head.map_or(0, |h| CREATED_LEN + varint_len(h.dropped));
        let mut data = Vec::with_capacity(key.len() + head_len + REV_LEN * count);
        data.extend_from_slice(key);
        if let Some(h) = head {
            data.extend_from_slice(&h.created.to_le_bytes());
            write_varint(&mut data, h.dropped);
        }
        data.extend_from_slice(stored);
        for packed in extra {
            data.extend_from_slice(&packed.to_le_bytes());
        }
        // Capacity is exact, so this does not reallocate or shrink. Both
        // casts are lossless: count <= MAX_REVISIONS and head_len <= 18.
        Ok(Self {
            data: data.into_boxed_slice(),
            word: LIST_FLAG | ((head_len as u64) << HEAD_SHIFT) | count as u64,
        })
    }

    /// The only revision, when the entry stores exactly one and no head.
    fn single(&self) -> Option<u64> {
        (self.word & LIST_FLAG == 0).then_some(self.word)
    }

    /// Length in bytes of the head; 0 without one.
    fn head_len(&self) -> usize {
        if self.word & LIST_FLAG == 0 {
            0
        } else {
            ((self.word >> HEAD_SHIFT) & HEAD_MASK) as usize
        }
    }

    /// Length of the key: everything in `data` before the head and the
    /// revision list. This runs on every comparison in a tree search.
    fn key_len(&self) -> usize {
        if self.word & LIST_FLAG == 0 {
            return self.data.len();
        }
        let tail =
            ((self.word >> HEAD_SHIFT) & HEAD_MASK) as usize + REV_LEN * (self.word & COUNT_MASK) as usize;
        self.data.len() - tail
    }

    fn head(&self) -> Option<Head> {
        let head_len = self.head_len();
        if head_len == 0 {
            return None;
        }
        let start = self.key_len();
        let head = &self.data[start..start + head_len];
        Some(Head { created: read_u64(&head[..CREATED_LEN]), dropped: read_varint(&head[CREATED_LEN..]) })
    }

    /// The stored revision list (packed u64 LE each); empty for a single
    /// revision, which lives in `word`.
    fn list_bytes(&self) -> &[u8] {
        if self.word & LIST_FLAG == 0 {
            return &[];
        }
        &self.data[self.data.len() - REV_LEN * self.len()..]
    }

    fn is_tombstone(&self, idx: usize) -> bool {
        Revision::unpack(self.packed(idx)).1
    }

    /// The packed form of stored revision `idx` (< [`KeyEntry::len`]).
    fn packed(&self, idx: usize) -> u64 {
        match self.single() {
            Some(only) => only,
            None => {
                let bytes = self.list_bytes();
                read_u64(&bytes[idx * REV_LEN..(idx + 1) * REV_LEN])
            }
        }
    }

    /// How many stored revisions have `main <= at_rev`.
    fn count_at_or_before(&self, at_rev: i64) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        // Hot keys can hold thousands of revisions between compactions.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if Revision::unpack(self.packed(mid)).0.main <= at_rev {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

impl Borrow<[u8]> for KeyEntry {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl PartialEq for KeyEntry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for KeyEntry {}

impl PartialOrd for KeyEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(other.key())
    }
}

impl fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Revs<'a>(&'a KeyEntry);
        impl fmt::Debug for Revs<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(self.0.revisions().map(|(rev, tombstone)| {
                        format!("{}.{}{}", rev.main, rev.sub, if tombstone { "t" } else { "" })
                    }))
                    .finish()
            }
        }
        let mut s = f.debug_struct("KeyEntry");
        s.field("key", &self.key().escape_ascii().to_string());
        if let Some(head) = self.head() {
            s.field("created", &Revision::unpack(head.created).0);
            s.field("dropped", &head.dropped);
        }
        s.field("revisions", &Revs(self)).finish()
    }
}

fn position_to_version(position: usize) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

fn read_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0; 8];
    buf.copy_from_slice(bytes);
    u64::from_le_bytes(buf)
}

fn varint_len(mut value: u64) -> usize {
    let mut len = 1;
    while value >= 0x80 {
        value >>= 7;
        len += 1;
    }
    len
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8]) -> u64 {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            break;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    fn at(mod_main: i64, create_main: i64, version: i64) -> Option<KeyAt> {
        Some(KeyAt { mod_revision: rev(mod_main), create_revision: rev(create_main), version })
    }

    /// Builds a key from `ops`: positive = put at that main, negative =
    /// delete at its absolute value.
    fn entry(ops: &[i64]) -> KeyEntry {
        let mut e = KeyEntry::new(b"foo", rev(ops[0])).expect("first put");
        for &op in &ops[1..] {
            if op > 0 {
                e.put(rev(op)).expect("put");
            } else {
                e.tombstone(rev(-op)).expect("tombstone");
            }
        }
        e
    }

    fn listed(e: &KeyEntry) -> Vec<(i64, bool)> {
        e.revisions().map(|(r, t)| (r.main, t)).collect()
    }

    fn compacted(e: &KeyEntry, at_rev: i64) -> (KeyEntry, Vec<i64>, bool) {
        let mut e = e.clone();
        let mut removed = Vec::new();
        let empty = e.compact(at_rev, &mut removed);
        (e, removed.iter().map(|r| r.main).collect(), empty)
    }

    /// put@1 put@2 delete@3 put@4 delete@5, as in etcd's key_index.go.
    fn etcd_example() -> KeyEntry {
        entry(&[1, 2, -3, 4, -5])
    }

    #[test]
    fn layout_is_one_exact_allocation() {
        assert_eq!(std::mem::size_of::<KeyEntry>(), 24);
        // One revision: the allocation is the key alone.
        let e = entry(&[2]);
        assert_eq!((e.key(), e.len(), e.heap_bytes()), (&b"foo"[..], 1, 3));
        assert_eq!(&*e.data, b"foo");
        assert_eq!(e.word, rev(2).pack(false).expect("pack"));
        // More: key, then the packed revisions; the word holds the count.
        let e = entry(&[2, -3]);
        assert_eq!(e.key(), b"foo");
        assert_eq!(e.heap_bytes(), 3 + 2 * 8);
        assert_eq!(e.word, LIST_FLAG | 2);
        let mut data = b"foo".to_vec();
        data.extend_from_slice(&rev(2).pack(false).expect("pack").to_le_bytes());
        data.extend_from_slice(&rev(3).pack(true).expect("pack").to_le_bytes());
        assert_eq!(&*e.data, &data[..]);
        let empty_key = KeyEntry::new(b"", rev(2)).expect("put");
        assert_eq!(empty_key.key(), b"");
        assert_eq!(empty_key.len(), 1);
        assert_eq!(empty_key.heap_bytes(), 0);
        let empty_key = empty_key.appended(rev(3), false).expect("put");
        assert_eq!((empty_key.key(), empty_key.len()), (&b""[..], 2));
    }

    #[test]
    fn single_revision_keeps_its_flags() {
        // The largest packable revision, as a tombstone, must still read as
        // a single revision: bit 63 stays clear.
        let top = Revision::new(Revision::MAX_MAIN, Revision::MAX_SUB);
        let e = entry(&[2]).appended(top, true).expect("tombstone");
        let mut removed = Vec::new();
        let mut c = e.clone();
        assert!(!c.compact(Revision::MAX_MAIN, &mut removed));
        assert_eq!(c.word >> 63, 0);
        assert_eq!(c.revisions().collect::<Vec<_>>(), [(top, true)]);
        assert_eq!((c.key(), c.heap_bytes()), (&b"foo"[..], 3));
        assert_eq!(c.get(Revision::MAX_MAIN), None);
        let e = KeyEntry::new(b"k", Revision::new(Revision::MAX_MAIN, 7)).expect("put");
        assert_eq!(e.newest(), Some((Revision::new(Revision::MAX_MAIN, 7), false)));
        assert_eq!(e.get(Revision::MAX_MAIN).map(|k| k.version), Some(1));
    }

    #[test]
    fn restored_entry_keeps_create_revision_and_version() {
        let e = KeyEntry::restored(b"k", rev(7), rev(3), 4).expect("restored");
        assert_eq!(e.get(7), at(7, 3, 4));
        // One revision, but with a head: a list of one.
        assert_eq!((e.len(), e.key(), e.heap_bytes()), (1, &b"k"[..], 1 + 9 + 8));
        assert_eq!(e.word, LIST_FLAG | (9 << HEAD_SHIFT) | 1);
        let e = e.appended(rev(9), false).expect("put");
        assert_eq!(e.get(9), at(9, 3, 5));
        let plain = KeyEntry::restored(b"k", rev(7), rev(7), 1).expect("restored");
        assert_eq!(plain.get(7), at(7, 7, 1));
    }

    #[test]
    fn put_starts_generation_with_version_one() {
        let e = entry(&[2]);
        assert_eq!(e.get(1), None);
        assert_eq!(e.get(2), at(2, 2, 1));
        assert_eq!(e.get(100), at(2, 2, 1));
    }

    #[test]
    fn puts_increase_version() {
        let e = entry(&[2, 4, 7]);
        assert_eq!(e.get(3), at(2, 2, 1));
        assert_eq!(e.get(4), at(4, 2, 2));
        assert_eq!(e.get(6), at(4, 2, 2));
        assert_eq!(e.get(7), at(7, 2, 3));
    }

    #[test]
    fn tombstone_hides_key_and_put_restarts_generation() {
        let e = entry(&[2, 3, -4, 6, 7]);
        assert_eq!(e.get(3), at(3, 2, 2));
        assert_eq!(e.get(4), None);
        assert_eq!(e.get(5), None);
        assert_eq!(e.get(6), at(6, 6, 1));
        assert_eq!(e.get(7), at(7, 6, 2));
    }

    #[test]
    fn sub_revisions_order_within_main() {
        let mut e = KeyEntry::new(b"k", Revision::new(5, 0)).expect("put");
        e.tombstone(Revision::new(5, 1)).expect("tombstone");
        e.put(Revision::new(5, 2)).expect("put");
        // A read at 5 sees the end of transaction 5.
        let got = e.get(5).expect("live");
        assert_eq!(got.mod_revision, Revision::new(5, 2));
        assert_eq!(got.create_revision, Revision::new(5, 2));
        assert_eq!(got.version, 1);
        assert_eq!(e.get(4), None);
    }

    #[test]
    fn tombstone_requires_live_key() {
        let mut e = entry(&[2, -3]);
        assert_eq!(e.tombstone(rev(4)), Err(IndexError::RevisionNotFound));
        let mut removed = Vec::new();
        let mut gone = entry(&[2, -3]);
        assert!(gone.compact(4, &mut removed));
        assert!(gone.is_empty());
        assert_eq!(gone.key(), b"foo");
        assert_eq!(gone.tombstone(rev(5)), Err(IndexError::RevisionNotFound));
        // An emptied entry still accepts a put: a new generation.
        gone.put(rev(5)).expect("put");
        assert_eq!(gone.get(5), at(5, 5, 1));
        e.put(rev(4)).expect("put");
        e.tombstone(rev(5)).expect("tombstone");
    }

    #[test]
    fn revisions_must_increase() {
        let mut e = entry(&[3]);
        for bad in [rev(2), rev(3)] {
            assert_eq!(e.put(bad), Err(IndexError::OutOfOrder { last: rev(3), rev: bad }));
            assert_eq!(e.tombstone(bad), Err(IndexError::OutOfOrder { last: rev(3), rev: bad }));
        }
        assert_eq!(
            e.put(Revision::new(Revision::MAX_MAIN + 1, 0)),
            Err(IndexError::Revision(RevisionError::MainOutOfRange(Revision::MAX_MAIN + 1)))
        );
        assert!(KeyEntry::new(b"k", rev(-1)).is_err());
        e.put(Revision::new(3, 1)).expect("same main, later sub");
        assert_eq!(listed(&e), [(3, false), (3, false)]);
    }

    #[test]
    fn etcd_example_reads() {
        let e = etcd_example();
        assert_eq!(listed(&e), [(1, false), (2, false), (3, true), (4, false), (5, true)]);
        assert_eq!(e.get(0), None);
        assert_eq!(e.get(1), at(1, 1, 1));
        assert_eq!(e.get(2), at(2, 1, 2));
        assert_eq!(e.get(3), None);
        assert_eq!(e.get(4), at(4, 4, 1));
        assert_eq!(e.get(5), None);
        assert_eq!(e.get(6), None);
    }

    #[test]
    fn etcd_example_compactions() {
        let e = etcd_example();

        let (c2, removed, empty) = compacted(&e, 2);
        assert_eq!(listed(&c2), [(2, false), (3, true), (4, false), (5, true)]);
        assert_eq!((removed, empty), (vec![1], false));
        assert_eq!(c2.get(2), at(2, 1, 2));
        assert_eq!(c2.get(4), at(4, 4, 1));

        let (c4, removed, empty) = compacted(&e, 4);
        assert_eq!(listed(&c4), [(4, false), (5, true)]);
        assert_eq!((removed, empty), (vec![1, 2, 3], false));
        assert_eq!(c4.get(4), at(4, 4, 1));
        assert_eq!(c4.heap_bytes(), 3 + 2 * 8, "no head needed");

        let (c5, removed, empty) = compacted(&e, 5);
        assert_eq!(listed(&c5), [(5, true)]);
        assert_eq!((removed, empty), (vec![1, 2, 3, 4], false));
        assert_eq!(c5.get(5), None);

        let (c6, removed, empty) = compacted(&e, 6);
        assert_eq!(listed(&c6), []);
        assert_eq!((removed, empty), (vec![1, 2, 3, 4, 5], true));

        // Step by step gives the same result as jumping.
        let (c4b, removed, _) = compacted(&c2, 4);
        assert_eq!((listed(&c4b), removed), (listed(&c4), vec![2, 3]));
        let (c5b, removed, _) = compacted(&c4b, 5);
        assert_eq!((listed(&c5b), removed), (listed(&c5), vec![4]));
        let (_, removed, empty) = compacted(&c5b, 6);
        assert_eq!((removed, empty), (vec![5], true));
    }

    #[test]
    fn compact_keeps_newest_at_or_before() {
        let e = entry(&[2, 4, 6, 8]);
        let (c, removed, empty) = compacted(&e, 5);
        assert_eq!(listed(&c), [(4, false), (6, false), (8, false)]);
        assert_eq!((removed, empty), (vec![2], false));
        // Create revision and versions survive the loss of revision 2.
        assert_eq!(c.get(5), at(4, 2, 2));
        assert_eq!(c.get(8), at(8, 2, 4));

        let (c, removed, _) = compacted(&e, 6);
        assert_eq!((listed(&c), removed), (vec![(6, false), (8, false)], vec![2, 4]));
        assert_eq!(c.get(6), at(6, 2, 3));
        // Compacting an already cut generation accumulates.
        let (c, removed, _) = compacted(&c, 9);
        assert_eq!((listed(&c), removed), (vec![(8, false)], vec![6]));
        assert_eq!(c.get(9), at(8, 2, 4));
    }

    #[test]
    fn compact_before_first_revision_changes_nothing() {
        let e = entry(&[5, 6]);
        let (c, removed, empty) = compacted(&e, 4);
        assert_eq!((listed(&c), removed, empty), (listed(&e), vec![], false));
        let (c, removed, _) = compacted(&e, 5);
        assert_eq!((listed(&c), removed), (listed(&e), vec![]));
    }

    #[test]
    fn compact_drops_generations_closed_before() {
        let e = entry(&[2, 3, -4, 6, 7, -8, 10]);
        let (c, removed, _) = compacted(&e, 5);
        assert_eq!(listed(&c), [(6, false), (7, false), (8, true), (10, false)]);
        assert_eq!(removed, [2, 3, 4]);
        assert_eq!(c.get(6), at(6, 6, 1));
        assert_eq!(c.get(7), at(7, 6, 2));

        let (c, removed, _) = compacted(&e, 9);
        assert_eq!((listed(&c), removed), (vec![(10, false)], vec![2, 3, 4, 6, 7, 8]));
        assert_eq!(c.get(10), at(10, 10, 1));
        assert_eq!(c.get(9), None);
    }

    #[test]
    fn compact_keeps_tombstone_at_compaction_revision() {
        let e = entry(&[2, 3, -4, 6]);
        let (c, removed, empty) = compacted(&e, 4);
        assert_eq!(listed(&c), [(4, true), (6, false)]);
        assert_eq!((removed, empty), (vec![2, 3], false));
        assert_eq!(c.get(4), None);
        assert_eq!(c.get(5), None);
        assert_eq!(c.get(6), at(6, 6, 1));
        // The next compaction past it drops it.
        let (c, removed, _) = compacted(&c, 5);
        assert_eq!((listed(&c), removed), (vec![(6, false)], vec![4]));
    }

    #[test]
    fn compact_removes_fully_deleted_key() {
        let e = entry(&[2, 3, -4]);
        let (c, removed, empty) = compacted(&e, 4);
        assert_eq!((listed(&c), removed, empty), (vec![(4, true)], vec![2, 3], false));
        let (c, removed, empty) = compacted(&e, 5);
        assert_eq!((listed(&c), removed, empty), (vec![], vec![2, 3, 4], true));
    }

    #[test]
    fn compact_with_generation_created_after() {
        let e = entry(&[2, -3, 8, 9]);
        let (c, removed, _) = compacted(&e, 5);
        assert_eq!((listed(&c), removed), (vec![(8, false), (9, false)], vec![2, 3]));
        assert_eq!(c.get(9), at(9, 8, 2));
    }

    #[test]
    fn compact_same_main_keeps_generation_tombstone_like_etcd() {
        // put@5.0 delete@5.1 put@5.2: etcd's compact(5) stops at the first
        // generation whose tombstone is not below 5 and keeps from there.
        let mut e = KeyEntry::new(b"k", Revision::new(3, 0)).expect("put");
        e.put(Revision::new(5, 0)).expect("put");
        e.tombstone(Revision::new(5, 1)).expect("tombstone");
        e.put(Revision::new(5, 2)).expect("put");
        let mut removed = Vec::new();
        assert!(!e.compact(5, &mut removed));
        assert_eq!(removed, [Revision::new(3, 0), Revision::new(5, 0)]);
        let kept: Vec<_> = e.revisions().collect();
        assert_eq!(kept, [(Revision::new(5, 1), true), (Revision::new(5, 2), false)]);
        assert_eq!(e.get(5).map(|k| k.version), Some(1));
    }

    #[test]
    fn head_survives_later_writes_and_large_counts() {
        let mut e = KeyEntry::new(b"key", rev(2)).expect("put");
        for main in 3..=400 {
            e.put(rev(main)).expect("put");
        }
        let mut removed = Vec::new();
        assert!(!e.compact(399, &mut removed));
        assert_eq!(removed.len(), 397);
        assert_eq!(e.key(), b"key");
        // Head: 8 bytes created + 2 byte varint for 397.
        assert_eq!(e.heap_bytes(), 3 + 10 + 2 * 8);
        assert_eq!(e.word, LIST_FLAG | (10 << HEAD_SHIFT) | 2);
        e.put(rev(401)).expect("put");
        assert_eq!(e.get(399), at(399, 2, 398));
        assert_eq!(e.get(401), at(401, 2, 400));
        e.tombstone(rev(402)).expect("tombstone");
        e.put(rev(403)).expect("put");
        assert_eq!(e.get(403), at(403, 403, 1));
        assert!(!e.compact(403, &mut removed));
        assert_eq!(listed(&e), [(403, false)]);
        assert_eq!(e.heap_bytes(), 3, "head dropped with its generation");
        assert_eq!(e.single(), Some(rev(403).pack(false).expect("pack")));
    }

    #[test]
    fn varint_round_trips() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX) + 1, u64::MAX] {
            let mut out = Vec::new();
            write_varint(&mut out, value);
            assert_eq!(out.len(), varint_len(value));
            assert_eq!(read_varint(&out), value);
        }
    }

    #[test]
    fn entries_order_and_borrow_by_key() {
        use std::collections::BTreeSet;
        let mut set = BTreeSet::new();
        for (key, main) in [(&b"b"[..], 2), (b"a", 3), (b"ab", 4)] {
            set.insert(KeyEntry::new(key, rev(main)).expect("put"));
        }
        let keys: Vec<&[u8]> = set.iter().map(KeyEntry::key).collect();
        assert_eq!(keys, [&b"a"[..], b"ab", b"b"]);
        assert_eq!(set.get(&b"ab"[..]).and_then(|e| e.get(4)), at(4, 4, 1));
        let dbg = format!("{:?}", entry(&[2, -3]));
        assert!(dbg.contains("3.0t"), "{dbg}");
    }

    #[test]
    fn error_messages() {
        assert_eq!(IndexError::RevisionNotFound.to_string(), "mvcc: revision not found");
        let err = IndexError::from(RevisionError::SubOutOfRange(-1));
        assert!(std::error::Error::source(&err).is_some());
    }
}
