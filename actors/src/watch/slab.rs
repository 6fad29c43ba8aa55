//! A shard's watch records, addressed by slot number (what the indexes store: 4 bytes a watch).
//!
//! The records live in fixed chunks of [`CHUNK_SLOTS`] rather than one growing `Vec`: a `Vec`
//! doubles, so at 2.5M watches a shard would hold room for up to 4.2M records (48 bytes each)
//! plus, for a while, the freed copies of its earlier sizes. Chunks waste at most one
//! partly-filled chunk, and slot numbers never move.
//!
//! ```text
//!   slot 9000 ─▶ chunk 9000 / 4096 = 2, offset 9000 % 4096 = 808
//!   chunks: [4096 records] [4096 records] [808+ records, growing]   free: slots to reuse first
//! ```

use super::watcher::Watcher;

/// Records per chunk: 192 KiB of 48-byte records.
pub const CHUNK_SLOTS: usize = 4096;

/// The records of one shard.
#[derive(Debug, Default)]
pub struct WatchSlab {
    /// Every chunk but the last holds exactly `CHUNK_SLOTS` slots; the last grows up to it.
    chunks: Vec<Vec<Option<Watcher>>>,
    /// Empty slots below the end, reused before the end grows.
    free: Vec<u32>,
    len: usize,
    /// Heap bytes of the records' keys (long keys only; short ones are inline).
    key_bytes: usize,
}

fn split(slot: u32) -> (usize, usize) {
    (slot as usize / CHUNK_SLOTS, slot as usize % CHUNK_SLOTS)
}

impl WatchSlab {
    /// Records held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One past the highest slot in use or free: slots range over `0..end()`.
    pub fn end(&self) -> u32 {
        let full = self.chunks.len().saturating_sub(1) * CHUNK_SLOTS;
        (full + self.chunks.last().map_or(0, Vec::len)) as u32
    }

    /// The record in `slot`.
    pub fn get(&self, slot: u32) -> Option<&Watcher> {
        let (chunk, offset) = split(slot);
        self.chunks.get(chunk)?.get(offset)?.as_ref()
    }

    /// The record in `slot`, to change it.
    pub fn get_mut(&mut self, slot: u32) -> Option<&mut Watcher> {
        let (chunk, offset) = split(slot);
        self.chunks.get_mut(chunk)?.get_mut(offset)?.as_mut()
    }

    /// Stores a record; returns its slot.
    pub fn insert(&mut self, watcher: Watcher) -> u32 {
        self.len += 1;
        self.key_bytes += watcher.heap_bytes();
        if let Some(slot) = self.free.pop() {
            let (chunk, offset) = split(slot);
            self.chunks[chunk][offset] = Some(watcher);
            return slot;
        }
        let slot = self.end();
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK_SLOTS => {
                if last.len() == last.capacity() {
                    // Grows as a Vec would, but never past one chunk.
                    last.reserve_exact((last.len() * 2).clamp(16, CHUNK_SLOTS) - last.len());
                }
                last.push(Some(watcher));
            }
            _ => {
                // A first chunk starts small (most shards hold few watches); later ones are
                // allocated whole.
                let mut chunk = Vec::with_capacity(if self.chunks.is_empty() { 16 } else { CHUNK_SLOTS });
                chunk.push(Some(watcher));
                self.chunks.push(chunk);
            }
        }
        slot
    }

    /// Takes the record out of `slot`, which becomes free.
    pub fn remove(&mut self, slot: u32) -> Option<Watcher> {
        let (chunk, offset) = split(slot);
        let watcher = self.chunks.get_mut(chunk)?.get_mut(offset)?.take()?;
        self.len -= 1;
        self.key_bytes -= watcher.heap_bytes();
        self.free.push(slot);
        Some(watcher)
    }

    /// Every record with its slot.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Watcher)> {
        self.chunks.iter().flatten().enumerate().filter_map(|(slot, w)| w.as_ref().map(|w| (slot as u32, w)))
    }

    /// Every record, to change them.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Watcher> {
        self.chunks.iter_mut().flatten().flatten()
    }

    /// Gives back memory after many records went away: drops free slots at the end (slots in
    /// use never move) and chunks left empty, and shrinks the free list.
    pub fn trim(&mut self) {
        let before = self.end();
        while let Some(last) = self.chunks.last_mut() {
            while matches!(last.last(), Some(None)) {
                last.pop();
            }
            if !last.is_empty() {
                if last.len() < last.capacity() / 2 {
                    last.shrink_to_fit();
                }
                break;
            }
            self.chunks.pop();
        }
        let end = self.end();
        if end < before {
            self.free.retain(|s| *s < end);
        }
        if self.free.len() < self.free.capacity() / 2 {
            self.free.shrink_to_fit();
        }
    }

    /// Heap bytes: the chunks, the free list and the long keys.
    pub fn heap_bytes(&self) -> usize {
        let chunks: usize = self.chunks.iter().map(Vec::capacity).sum();
        chunks * std::mem::size_of::<Option<Watcher>>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Option<Watcher>>>()
            + self.free.capacity() * 4
            + self.key_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::messages::WatchSpec;
    use bytes::Bytes;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn watcher(id: i64) -> Watcher {
        Watcher::new(&WatchSpec {
            stream: 1,
            watch_id: id,
            key: Bytes::from(format!("key{id}")),
            range_end: Bytes::new(),
            start_revision: 1,
            prev_kv: false,
            no_put: false,
            no_delete: false,
            progress_notify: false,
        })
    }

    #[test]
    fn full_chunks_have_no_slack_and_trim_gives_chunks_back() {
        let mut slab = WatchSlab::default();
        let slots: Vec<u32> = (0..3 * CHUNK_SLOTS as i64 + 5).map(|i| slab.insert(watcher(i))).collect();
        assert_eq!(slots.last(), Some(&(3 * CHUNK_SLOTS as u32 + 4)));
        assert!(slab.chunks[..3].iter().all(|c| c.capacity() == CHUNK_SLOTS));
        assert_eq!(slab.get(CHUNK_SLOTS as u32 + 7).map(|w| w.watch_id), Some(CHUNK_SLOTS as i64 + 7));
        for slot in slots.iter().skip(CHUNK_SLOTS) {
            slab.remove(*slot);
        }
        slab.trim();
        assert_eq!((slab.chunks.len(), slab.len(), slab.end()), (1, CHUNK_SLOTS, CHUNK_SLOTS as u32));
        assert!(slab.free.is_empty());
        assert_eq!(slab.insert(watcher(-1)), CHUNK_SLOTS as u32, "the end grows again after a trim");
    }

    proptest! {
        /// The slab against a map of slot → record: same contents, slots unique and reused.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((any::<bool>(), 0usize..64), 1..400)) {
            let mut slab = WatchSlab::default();
            let mut model: BTreeMap<u32, i64> = BTreeMap::new();
            for (n, (insert, pick)) in ops.into_iter().enumerate() {
                if insert || model.is_empty() {
                    let slot = slab.insert(watcher(n as i64));
                    prop_assert!(model.insert(slot, n as i64).is_none(), "slot {} handed out twice", slot);
                } else {
                    let slot = *model.keys().nth(pick % model.len()).unwrap();
                    prop_assert_eq!(slab.remove(slot).map(|w| w.watch_id), model.remove(&slot));
                    prop_assert!(slab.remove(slot).is_none());
                }
                if n % 50 == 49 {
                    slab.trim();
                }
                prop_assert_eq!(slab.len(), model.len());
                let held: Vec<(u32, i64)> = slab.iter().map(|(s, w)| (s, w.watch_id)).collect();
                prop_assert_eq!(held, model.iter().map(|(s, i)| (*s, *i)).collect::<Vec<_>>());
            }
        }
    }
}
