//! One record of the write-ahead log, and the checksum chain that ties it to the record
//! before it:
//!
//! ```text
//!  0        4        8                16
//!  ┌────────┬────────┬────────────────┬──────────────────────┐
//!  │ len    │ crc    │ index          │ payload (len bytes)  │
//!  │ u32 LE │ u32 LE │ u64 LE         │ an entry in postcard │
//!  └────────┴────────┴────────────────┴──────────────────────┘
//!  crc = crc32(index ‖ payload), started from the crc of the record before it
//!        (a segment's first record starts from its first index, see `seed`)
//! ```
//!
//! A header of zeros ends a segment's records: segments are zero-filled before their first
//! record (see `super::segment`). Why a chain and not a checksum per record: after a crash or
//! a truncation the bytes past the last good record may hold records that were good once (a
//! longer old tail, overwritten only in part). Their checksums started from another record, so
//! the chain rejects them, as etcd's WAL rejects them with its rolling CRC.

/// The bytes before a record's payload.
pub const HEADER_BYTES: usize = 16;

/// What a record's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub crc: u32,
    pub index: u64,
}

impl Header {
    /// Reads a header; None when it is all zeros (the end of a segment's records).
    pub fn parse(bytes: &[u8; HEADER_BYTES]) -> Option<Self> {
        let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let mut index = [0; 8];
        index.copy_from_slice(&bytes[8..]);
        let header = Self { len: word(0), crc: word(4), index: u64::from_le_bytes(index) };
        (header != Self { len: 0, crc: 0, index: 0 }).then_some(header)
    }

    /// Whether `payload` is this header's, chained to a record whose crc was `previous`.
    pub fn matches(&self, previous: u32, payload: &[u8]) -> bool {
        payload.len() == self.len as usize && checksum(previous, self.index, payload) == self.crc
    }
}

/// Where a segment's chain starts: from its first index, so that a record copied into another
/// segment, or left from an older file at the same name, does not read as this one's.
pub fn seed(first_index: u64) -> u32 {
    checksum(0, first_index, &[])
}

/// Appends the record of `index` with `payload` to `out`, chained to `previous`; returns its crc.
pub fn encode(out: &mut Vec<u8>, previous: u32, index: u64, payload: &[u8]) -> u32 {
    let crc = checksum(previous, index, payload);
    // A payload over 4 GiB cannot be sent by a client (requests are capped far lower).
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
    crc
}

fn checksum(previous: u32, index: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(previous);
    hasher.update(&index.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(bytes: &[u8]) -> Header {
        Header::parse(bytes[..HEADER_BYTES].try_into().unwrap()).unwrap()
    }

    #[test]
    fn a_record_reads_back_only_on_its_own_chain() {
        let mut out = Vec::new();
        let first = encode(&mut out, seed(7), 7, b"seven");
        let second_at = out.len();
        encode(&mut out, first, 8, b"eight");
        let header = header_of(&out);
        assert_eq!((header.len, header.index), (5, 7));
        assert!(header.matches(seed(7), &out[HEADER_BYTES..second_at]));
        let second = header_of(&out[second_at..]);
        assert!(second.matches(first, &out[second_at + HEADER_BYTES..]));
        // The same bytes after another record (an old tail past a truncation) do not chain.
        let mut other = Vec::new();
        let other_first = encode(&mut other, seed(7), 7, b"SEVEN");
        assert!(!second.matches(other_first, &out[second_at + HEADER_BYTES..]));
        assert!(!header.matches(seed(8), &out[HEADER_BYTES..second_at]), "another segment's seed");
        assert!(!header.matches(seed(7), b"sev"), "a torn payload");
    }

    #[test]
    fn zeros_end_the_records() {
        assert_eq!(Header::parse(&[0; HEADER_BYTES]), None);
    }
}
