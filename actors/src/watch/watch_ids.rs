//! The live watch ids of one stream, as a set: a bitset for the ids that etcd's clients let the
//! server choose (0, 1, 2, … in order), a sorted list for the rest (ids a client chose itself).
//!
//! Why not one sorted `Vec<i64>`: it costs 8 bytes a watch, and doubling makes that up to 16
//! (a stream of 20 watches held room for 32). Streams are many (5000 of 20 watches each in the
//! watch-memory table's 500 × 10 × 20 row), so that was ~13 bytes of every watch's ~100. The
//! bitset costs a bit a watch, grown one word at a time.
//!
//! ```text
//!   base ≤ id < base + 64·dense.len() ─▶ dense: [ids base..base+63] [base+64..base+127] …
//!   any other id                      ─▶ sparse: sorted
//! ```
//! The words grow at their end for an id in the word just past it, while they stay dense
//! enough (at least one live id in 16 bits on average: a stream whose ids climb past an old
//! watch that stays does not drag a long run of empty words behind it); empty words at the
//! front are dropped, so climbing auto ids move the window along. A sparse id that the words
//! grow over moves into them: every id has one place, found without searching the other.

/// Bits in a word of the dense set.
const WORD_BITS: i64 = 64;

/// A set of watch ids (see the module doc).
#[derive(Debug, Default)]
pub struct WatchIds {
    /// The id of bit 0 of `dense[0]`, a multiple of 64.
    base: i64,
    /// Bit `b` of word `w` is set when id `base + 64·w + b` is live.
    dense: Vec<u64>,
    /// Live ids outside the dense words, sorted.
    sparse: Vec<i64>,
}

impl WatchIds {
    /// Ids held.
    pub fn len(&self) -> usize {
        self.dense.iter().map(|w| w.count_ones() as usize).sum::<usize>() + self.sparse.len()
    }

    /// True when no id is held.
    pub fn is_empty(&self) -> bool {
        self.dense.is_empty() && self.sparse.is_empty()
    }

    /// The word and bit of `id` if it falls in the dense words.
    fn place(&self, id: i64) -> Option<(usize, u64)> {
        let offset = id.checked_sub(self.base).filter(|o| *o >= 0)?;
        let word = usize::try_from(offset / WORD_BITS).ok().filter(|w| *w < self.dense.len())?;
        Some((word, 1 << (offset % WORD_BITS)))
    }

    /// Whether `id` is held.
    pub fn contains(&self, id: i64) -> bool {
        match self.place(id) {
            Some((word, bit)) => self.dense[word] & bit != 0,
            None => self.sparse.binary_search(&id).is_ok(),
        }
    }

    /// Adds `id`; returns false when it was already held.
    pub fn insert(&mut self, id: i64) -> bool {
        if self.place(id).is_none() && self.extends_dense(id) {
            self.grow(id);
        }
        match self.place(id) {
            Some((word, bit)) => {
                let added = self.dense[word] & bit == 0;
                self.dense[word] |= bit;
                added
            }
            None => match self.sparse.binary_search(&id) {
                Ok(_) => false,
                Err(at) => {
                    // Exact growth: ids outside the words are few, and a doubled list wastes
                    // up to half of itself in every stream that has some.
                    self.sparse.reserve_exact(1);
                    self.sparse.insert(at, id);
                    true
                }
            },
        }
    }

    /// Whether `id`, outside the words, should grow them: it is the first id of an empty set
    /// (not negative), or falls in the word just past the end of words that are dense enough.
    fn extends_dense(&self, id: i64) -> bool {
        // Negative ids, and ids so high that a word's end would overflow, stay sparse.
        if !(0..=i64::MAX - 2 * WORD_BITS).contains(&id) {
            return false;
        }
        if self.dense.is_empty() {
            return true;
        }
        let end = self.base.saturating_add(WORD_BITS * self.dense.len() as i64);
        let next_word = id >= end && id - end < WORD_BITS;
        next_word && self.dense.len() < 1 + self.len() / 16
    }

    /// One more dense word, for `id`: exactly one (a `Vec`'s first push makes room for four).
    /// Sparse ids that fall in it move over.
    fn grow(&mut self, id: i64) {
        if self.dense.is_empty() {
            self.base = id - id % WORD_BITS;
        }
        let word_start = self.base + WORD_BITS * self.dense.len() as i64;
        self.dense.reserve_exact(1);
        self.dense.push(0);
        let from = self.sparse.partition_point(|i| *i < word_start);
        let to = self.sparse.partition_point(|i| *i < word_start + WORD_BITS);
        let last = self.dense.len() - 1;
        for moved in self.sparse.drain(from..to) {
            self.dense[last] |= 1 << (moved - word_start);
        }
    }

    /// Removes `id`; returns whether it was held.
    pub fn remove(&mut self, id: i64) -> bool {
        match self.place(id) {
            Some((word, bit)) => {
                let held = self.dense[word] & bit != 0;
                self.dense[word] &= !bit;
                // Empty words at the front go: auto ids only climb, so the window follows.
                let empty = self.dense.iter().take_while(|w| **w == 0).count();
                if empty == self.dense.len() {
                    self.dense = Vec::new();
                } else if empty > 0 {
                    self.dense.drain(..empty);
                    self.base += WORD_BITS * empty as i64;
                }
                held
            }
            None => match self.sparse.binary_search(&id) {
                Ok(at) => {
                    self.sparse.remove(at);
                    if self.sparse.len() <= self.sparse.capacity() / 2 {
                        self.sparse.shrink_to_fit();
                    }
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        (self.dense.capacity() + self.sparse.capacity()) * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn auto_ids_cost_a_bit_each() {
        let mut ids = WatchIds::default();
        for id in 0..100 {
            assert!(ids.insert(id));
        }
        assert!(!ids.insert(42), "already held");
        assert_eq!((ids.len(), ids.heap_bytes()), (100, 16), "two words, nothing sparse");
        assert!(ids.contains(99) && !ids.contains(100) && !ids.contains(-1));
    }

    #[test]
    fn sparse_ids_move_into_the_words_that_grow_over_them() {
        let mut ids = WatchIds::default();
        for id in [0, 200, 130, -5, i64::MIN, i64::MAX] {
            assert!(ids.insert(id));
        }
        assert_eq!((ids.dense.len(), ids.sparse.len()), (1, 5), "only 0 starts the words");
        (1..=128).for_each(|id| assert!(ids.insert(id)));
        assert_eq!(ids.dense.len(), 3, "64 and 128 each grew a word");
        assert_eq!(ids.sparse, [i64::MIN, -5, 200, i64::MAX], "130 moved into the third word");
        assert!(ids.contains(130) && !ids.contains(131));
        (0..=128).for_each(|id| assert!(ids.remove(id)));
        assert_eq!((ids.base, ids.dense.len()), (128, 1), "empty words at the front are dropped");
        for id in [130, 200, -5, i64::MIN, i64::MAX] {
            assert!(ids.remove(id), "{id}");
        }
        assert!(ids.is_empty());
        assert_eq!(ids.heap_bytes(), 0, "an empty set holds nothing");
    }

    #[test]
    fn ids_near_the_top_stay_sparse() {
        let mut ids = WatchIds::default();
        for id in [i64::MAX - 3, i64::MAX - 100, i64::MAX] {
            assert!(ids.insert(id) && ids.contains(id));
        }
        assert!(ids.dense.is_empty());
        assert!(ids.remove(i64::MAX - 3) && !ids.contains(i64::MAX - 3));
    }

    #[test]
    fn climbing_ids_past_a_watch_that_stays_hold_a_few_words_at_most() {
        let mut ids = WatchIds::default();
        ids.insert(3);
        for id in 4..10_000 {
            assert!(ids.insert(id));
            if id > 4 {
                assert!(ids.remove(id - 1));
            }
        }
        assert_eq!(ids.len(), 2);
        assert!(ids.heap_bytes() <= 32, "{} bytes for two ids", ids.heap_bytes());
        assert!(ids.contains(3) && ids.contains(9_999));
    }

    proptest! {
        /// The set against a BTreeSet: ids near zero (dense), far apart and near the top (sparse).
        #[test]
        fn behaves_like_a_set(ops in proptest::collection::vec((any::<bool>(), -80i64..300, 0u8..3), 1..500)) {
            let mut ids = WatchIds::default();
            let mut model = BTreeSet::new();
            for (insert, id, kind) in ops {
                let id = match kind {
                    0 => id,
                    1 => id.wrapping_mul(1 << 50),
                    _ => i64::MAX - id.abs(),
                };
                if insert {
                    prop_assert_eq!(ids.insert(id), model.insert(id));
                } else {
                    prop_assert_eq!(ids.remove(id), model.remove(&id));
                }
                prop_assert_eq!(ids.len(), model.len());
                for probe in [id, id.wrapping_add(1), id.wrapping_sub(1), 0, 63, 64] {
                    prop_assert_eq!(ids.contains(probe), model.contains(&probe), "id {}", probe);
                }
            }
        }
    }
}
