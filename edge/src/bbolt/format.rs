//! The bbolt 1.3 file format that etcd keeps its backend in: the one description that the
//! reader and the writer share.
//!
//! ```text
//! page n at n * page_size:  id u64 | flags u16 | count u16 | overflow u32 | body ...
//!                           a page with overflow k spans k + 1 pages; flags: 0x01 branch,
//!                           0x02 leaf, 0x04 meta, 0x10 freelist
//! meta (pages 0 and 1, body): magic u32 0xED0CDAED | version u32 2 | page_size u32 |
//!                           flags u32 | root bucket (root u64, sequence u64) | freelist u64 |
//!                           pgid u64 (pages in use) | txid u64 | checksum u64 (FNV-1a 64 of
//!                           the 56 bytes before it); the valid one with the higher txid wins
//! freelist (body):          count u64 ids of free pages (count 0: none; bbolt writes
//!                           count 0xFFFF in the header and the true count first when more)
//! branch element (16 B):    pos u32 | ksize u32 | child u64       key at element + pos
//! leaf element (16 B):      flags u32 | pos u32 | ksize u32 | vsize u32
//!                           key at element + pos, value right after; flags 0x01: a bucket
//! bucket value:             root u64 | sequence u64, and when root is 0 an inline leaf page
//! ```
//! All integers are little-endian (etcd runs on little-endian machines, and bbolt writes
//! its structs in the machine's order), with no padding. A branch's key for a child is the
//! child's first key; every key of a tree is in byte order.

pub(super) const MAGIC: u32 = 0xED0C_DAED;
pub(super) const VERSION: u32 = 2;
/// The size of page etcd's bbolt uses on Linux (the OS page).
pub(super) const PAGE_SIZE: usize = 4096;
pub(super) const PAGE_HEADER: usize = 16;
pub(super) const ELEMENT: usize = 16;
pub(super) const META_LEN: usize = 64;
/// A bucket's value starts with its root page and sequence.
pub(super) const BUCKET_HEADER: usize = 16;
pub(super) const BRANCH: u16 = 0x01;
pub(super) const LEAF: u16 = 0x02;
pub(super) const META: u16 = 0x04;
pub(super) const FREELIST: u16 = 0x10;
/// A leaf element's flag: the key names a nested bucket.
pub(super) const BUCKET_LEAF: u32 = 0x01;

/// FNV-1a, 64 bits: bbolt's meta checksum.
pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
