//! MVCC revisions and their packed 64-bit form.
//!
//! A [`Revision`] is etcd's `(main, sub)` pair: `main` is the store revision
//! of a transaction, `sub` numbers the changes inside it. The in-memory index
//! and the on-disk history both use a packed `u64` instead of the 16-byte
//! pair, laid out so that comparing packed values compares revisions:
//!
//! ```text
//!  63 62                   21 20               1   0
//! +--+-----------------------+------------------+---+
//! |0 |     main (42 bits)    |  sub (20 bits)   | t |
//! +--+-----------------------+------------------+---+
//! ```
//!
//! `t` marks a tombstone. It sits below `sub` so that it never changes the
//! order of two distinct revisions. Bit 63 is always clear: the index uses
//! it to tell a packed revision from its own metadata word (see
//! [`crate::mvcc::key_index`]), so `main` is limited to 42 bits,
//! [`Revision::MAX_MAIN`] = 2^42 - 1 ≈ 4.4·10^12. That lasts 13 years at ten
//! thousand writes a second (139 years at a thousand); [`Revision::pack`]
//! refuses anything larger, and the store then refuses the write. 2^20
//! changes per transaction is far beyond etcd's default limit of 128
//! operations per transaction.
//!
//! A history record's key is the packed form with `t` clear, big-endian, so
//! that byte order equals revision order. (This is the same byte layout as
//! with the earlier 43-bit `main`; only the range is smaller.)

use std::fmt;

/// Number of bits of the packed form that hold [`Revision::main`]; the bit
/// above them (63) is never set by [`Revision::pack`].
const MAIN_BITS: u32 = 42;
/// Number of bits of the packed form that hold [`Revision::sub`].
const SUB_BITS: u32 = 20;
/// Position of the lowest bit of `main` in the packed form.
const MAIN_SHIFT: u32 = SUB_BITS + 1;
const TOMBSTONE_BIT: u64 = 1;
const SUB_MASK: u64 = (1 << SUB_BITS) - 1;

/// A store revision: `main` orders transactions, `sub` orders the changes
/// within one. Ordering is by `main`, then `sub`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Revision {
    /// The revision of the transaction that made the change.
    pub main: i64,
    /// The index of the change inside its transaction.
    pub sub: i64,
}

/// Why a revision cannot be packed or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RevisionError {
    /// `main` is negative or does not fit in 42 bits (also reported for a
    /// history key whose top bit is set).
    MainOutOfRange(i64),
    /// `sub` is negative or does not fit in 20 bits.
    SubOutOfRange(i64),
    /// A history key was not exactly 8 bytes long.
    KeyLength(usize),
    /// A history key had the tombstone bit set; history keys never carry it.
    TombstoneBitInKey,
}

impl fmt::Display for RevisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MainOutOfRange(main) => {
                write!(f, "main revision {main} is outside 0..={}", Revision::MAX_MAIN)
            }
            Self::SubOutOfRange(sub) => {
                write!(f, "sub revision {sub} is outside 0..={}", Revision::MAX_SUB)
            }
            Self::KeyLength(len) => write!(f, "revision key has {len} bytes, expected 8"),
            Self::TombstoneBitInKey => f.write_str("revision key has the tombstone bit set"),
        }
    }
}

impl std::error::Error for RevisionError {}

impl Revision {
    /// The largest `main` that can be packed.
    pub const MAX_MAIN: i64 = (1 << MAIN_BITS) - 1;
    /// The largest `sub` that can be packed.
    pub const MAX_SUB: i64 = (1 << SUB_BITS) - 1;

    /// Creates a revision.
    pub const fn new(main: i64, sub: i64) -> Self {
        Self { main, sub }
    }

    /// Packs the revision and a tombstone flag into a `u64` whose numeric
    /// order equals the revision order. The result never has bit 63 set.
    ///
    /// Fails if `main` is outside `0..=MAX_MAIN` (2^42 - 1) or `sub` outside
    /// `0..=MAX_SUB` (2^20 - 1).
    pub fn pack(self, tombstone: bool) -> Result<u64, RevisionError> {
        if !(0..=Self::MAX_MAIN).contains(&self.main) {
            return Err(RevisionError::MainOutOfRange(self.main));
        }
        if !(0..=Self::MAX_SUB).contains(&self.sub) {
            return Err(RevisionError::SubOutOfRange(self.sub));
        }
        // Both casts are lossless: the range checks above hold.
        let main = self.main as u64;
        let sub = self.sub as u64;
        Ok((main << MAIN_SHIFT) | (sub << 1) | u64::from(tombstone))
    }

    /// Splits a packed value into the revision and its tombstone flag.
    ///
    /// This cannot fail: it is the inverse of [`Revision::pack`] on the
    /// values `pack` returns. A value with bit 63 set (which `pack` never
    /// returns) decodes to a `main` above [`Revision::MAX_MAIN`].
    pub fn unpack(packed: u64) -> (Self, bool) {
        let rev = Self {
            // Lossless: 43 and 20 bit values fit in i64.
            main: (packed >> MAIN_SHIFT) as i64,
            sub: ((packed >> 1) & SUB_MASK) as i64,
        };
        (rev, packed & TOMBSTONE_BIT != 0)
    }

    /// The fallible form of [`Revision::to_key_bytes`].
    pub fn try_to_key_bytes(self) -> Result<[u8; 8], RevisionError> {
        self.pack(false).map(u64::to_be_bytes)
    }

    /// The 8-byte key of this revision's history record: the packed form
    /// without the tombstone flag, big-endian so that byte order equals
    /// revision order.
    ///
    /// # Panics
    ///
    /// If the revision cannot be packed (see [`Revision::pack`]). The store
    /// never hands out such revisions: check against [`Revision::MAX_MAIN`]
    /// when allocating them, or use [`Revision::try_to_key_bytes`].
    pub fn to_key_bytes(self) -> [u8; 8] {
        match self.try_to_key_bytes() {
            Ok(bytes) => bytes,
            Err(err) => panic!("cannot encode revision {self:?}: {err}"),
        }
    }

    /// Decodes a history record key written by [`Revision::to_key_bytes`].
    ///
    /// Rejects keys that are not 8 bytes long, that have the tombstone bit
    /// set, or whose top bit is set (a `main` above [`Revision::MAX_MAIN`]).
    pub fn from_key_bytes(bytes: &[u8]) -> Result<Self, RevisionError> {
        let array: [u8; 8] = bytes.try_into().map_err(|_| RevisionError::KeyLength(bytes.len()))?;
        let (rev, tombstone) = Self::unpack(u64::from_be_bytes(array));
        if rev.main > Self::MAX_MAIN {
            return Err(RevisionError::MainOutOfRange(rev.main));
        }
        if tombstone {
            return Err(RevisionError::TombstoneBitInKey);
        }
        Ok(rev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn packs_bounds() {
        assert_eq!(Revision::new(0, 0).pack(false), Ok(0));
        assert_eq!(Revision::new(0, 0).pack(true), Ok(1));
        assert_eq!(Revision::MAX_MAIN, (1 << 42) - 1);
        assert_eq!(Revision::new(Revision::MAX_MAIN, Revision::MAX_SUB).pack(true), Ok(u64::MAX >> 1));
        assert_eq!(
            Revision::unpack(u64::MAX >> 1),
            (Revision::new(Revision::MAX_MAIN, Revision::MAX_SUB), true)
        );
        // Bit 63 is free for the index's own use.
        assert_eq!(Revision::unpack(1 << 63).0.main, Revision::MAX_MAIN + 1);
    }

    #[test]
    fn rejects_unpackable() {
        for main in [-1, i64::MIN, Revision::MAX_MAIN + 1, i64::MAX] {
            assert_eq!(Revision::new(main, 0).pack(false), Err(RevisionError::MainOutOfRange(main)));
        }
        for sub in [-1, Revision::MAX_SUB + 1] {
            assert_eq!(Revision::new(2, sub).pack(true), Err(RevisionError::SubOutOfRange(sub)));
        }
        assert!(Revision::new(-1, 0).try_to_key_bytes().is_err());
    }

    #[test]
    #[should_panic(expected = "cannot encode revision")]
    fn key_bytes_panics_on_unpackable() {
        let _ = Revision::new(1 << 42, 0).to_key_bytes();
    }

    #[test]
    fn key_bytes() {
        let rev = Revision::new(2, 3);
        let key = rev.to_key_bytes();
        assert_eq!(key, ((2u64 << 21) | (3 << 1)).to_be_bytes());
        assert_eq!(Revision::from_key_bytes(&key), Ok(rev));
        assert_eq!(Revision::from_key_bytes(&key[..7]), Err(RevisionError::KeyLength(7)));
        assert_eq!(Revision::from_key_bytes(&[0; 9]), Err(RevisionError::KeyLength(9)));
        let mut tomb = key;
        tomb[7] |= 1;
        assert_eq!(Revision::from_key_bytes(&tomb), Err(RevisionError::TombstoneBitInKey));
        // The largest revision still encodes; one bit above it does not decode.
        let max = Revision::new(Revision::MAX_MAIN, Revision::MAX_SUB);
        assert_eq!(max.to_key_bytes(), ((u64::MAX >> 1) & !1).to_be_bytes());
        assert_eq!(Revision::from_key_bytes(&max.to_key_bytes()), Ok(max));
        let mut high = key;
        high[0] |= 0x80;
        assert_eq!(Revision::from_key_bytes(&high), Err(RevisionError::MainOutOfRange((1 << 42) | 2)));
    }

    #[test]
    fn errors_display() {
        let msg = RevisionError::MainOutOfRange(-1).to_string();
        assert!(msg.contains("-1"), "{msg}");
        assert!(RevisionError::KeyLength(3).to_string().contains('3'));
    }

    fn packable() -> impl Strategy<Value = (Revision, bool)> {
        (0..=Revision::MAX_MAIN, 0..=Revision::MAX_SUB, any::<bool>())
            .prop_map(|(main, sub, t)| (Revision::new(main, sub), t))
    }

    proptest! {
        #[test]
        fn pack_round_trips((rev, t) in packable()) {
            let packed = rev.pack(t).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(packed >> 63, 0);
            prop_assert_eq!(Revision::unpack(packed), (rev, t));
            prop_assert_eq!(Revision::from_key_bytes(&rev.to_key_bytes()), Ok(rev));
        }

        #[test]
        fn pack_preserves_order((a, ta) in packable(), (b, tb) in packable()) {
            let pa = a.pack(ta).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let pb = b.pack(tb).map_err(|e| TestCaseError::fail(e.to_string()))?;
            if a != b {
                prop_assert_eq!(pa.cmp(&pb), a.cmp(&b));
            }
            prop_assert_eq!(a.to_key_bytes().cmp(&b.to_key_bytes()), a.cmp(&b));
        }

        #[test]
        fn order_near_boundaries(main in 0..4i64, sub in 0..4i64, dm in 0..2i64, ds in 0..2i64) {
            // Random pairs rarely share a main; this covers neighbouring ones.
            let a = Revision::new(main, Revision::MAX_SUB - sub);
            let b = Revision::new(main + dm, Revision::MAX_SUB - sub - ds);
            prop_assert_eq!(a.to_key_bytes().cmp(&b.to_key_bytes()), a.cmp(&b));
        }
    }
}
