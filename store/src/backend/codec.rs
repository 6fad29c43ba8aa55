//! On-disk encodings of the store's records (the format that `FORMAT_VERSION` names).
//!
//! - history: key = the 8-byte packed revision ([`Revision::to_key_bytes`]), value = one kind
//!   byte (`p` put, `d` delete) followed by the protobuf `mvccpb.KeyValue`. A delete's KeyValue
//!   holds only the key and its mod_revision, like etcd's tombstones.
//! - meta: fixed keys holding big-endian integers or the format string.

use bytes::Bytes;
use prost::Message;

use actcd_proto::mvccpb::KeyValue;

use crate::error::StoreError;
use crate::mvcc::revision::Revision;

/// The meta record naming the data format; a data dir without it (or with another) is refused.
pub const FORMAT_KEY: &[u8] = b"format";
/// The format this build reads and writes.
pub const FORMAT_VERSION: &[u8] = b"actcd-store-v1";
/// The meta record holding the last compaction revision.
pub const COMPACTED_KEY: &[u8] = b"compacted_revision";
/// The meta record holding the [`AppliedPosition`] (postcard), written by every commit in the
/// batch of the entries up to it, as etcd's consistent index is. Its name is the one the Raft
/// state machine gave it when it kept the record itself: data dirs written then open as they are.
pub const APPLIED_KEY: &[u8] = b"raft_applied";
/// A second applied-position record that builds up to d99d737 kept beside [`APPLIED_KEY`] (a
/// bare index), and the single-node store before the Raft log kept alone (a count of commands,
/// which no log id matches, so a data dir with only this record has no applied position). Read
/// by nothing; the first commit after an open deletes it.
pub const LEGACY_APPLIED_INDEX_KEY: &[u8] = b"applied_index";
/// The meta record holding the last applied Raft membership (postcard).
pub const RAFT_MEMBERSHIP_KEY: &[u8] = b"raft_membership";
/// The meta record holding every member id ever removed (postcard), written in the batch of
/// the membership that removed the last of them.
pub const RAFT_REMOVED_KEY: &[u8] = b"raft_removed";

/// The Raft log id of the last entry whose changes the store holds: etcd's consistent index
/// and term, with the member that led that term, as openraft names a log id. The fields are in
/// the order of openraft's `LogId` (term, node id, index), so the records the state machine
/// wrote as `LogId`s decode as this.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AppliedPosition {
    /// The term of the entry.
    pub term: u64,
    /// The member that led that term.
    pub leader: u64,
    /// The entry's log index.
    pub index: u64,
}

/// A store driven without Raft (tests, tools) names its entries by index alone.
impl From<u64> for AppliedPosition {
    fn from(index: u64) -> Self {
        Self { term: 0, leader: 0, index }
    }
}

/// Encodes an [`AppliedPosition`] for [`APPLIED_KEY`].
pub fn encode_applied(position: &AppliedPosition) -> Vec<u8> {
    postcard::to_stdvec(position).expect("three integers always encode")
}

/// Decodes an [`APPLIED_KEY`] record.
pub fn decode_applied(bytes: &[u8]) -> Result<AppliedPosition, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("applied position: {e}")))
}

const PUT_KIND: u8 = b'p';
const DELETE_KIND: u8 = b'd';

/// One decoded history record.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRecord {
    /// The revision it was written at.
    pub revision: Revision,
    /// True for a delete (tombstone).
    pub tombstone: bool,
    /// The stored KeyValue.
    pub kv: KeyValue,
}

/// Encodes a history value.
pub fn encode_history_value(tombstone: bool, kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + kv.encoded_len());
    out.push(if tombstone { DELETE_KIND } else { PUT_KIND });
    // Encoding into a Vec cannot run out of space.
    let _ = kv.encode(&mut out);
    out
}

/// Splits a history value into (tombstone, the encoded KeyValue), without decoding it.
pub fn split_history_value(value: &[u8]) -> Result<(bool, &[u8]), StoreError> {
    let (kind, body) =
        value.split_first().ok_or_else(|| StoreError::Corrupt("empty history record".into()))?;
    match *kind {
        PUT_KIND => Ok((false, body)),
        DELETE_KIND => Ok((true, body)),
        other => Err(StoreError::Corrupt(format!("unknown history record kind {other}"))),
    }
}

/// Decodes a history value (without its key).
pub fn decode_history_value(value: &[u8]) -> Result<(bool, KeyValue), StoreError> {
    let (tombstone, body) = split_history_value(value)?;
    let kv = KeyValue::decode(Bytes::copy_from_slice(body))
        .map_err(|e| StoreError::Corrupt(format!("history record: {e}")))?;
    Ok((tombstone, kv))
}

/// Decodes a whole history record from its RocksDB key and value.
pub fn decode_history(key: &[u8], value: &[u8]) -> Result<HistoryRecord, StoreError> {
    let revision =
        Revision::from_key_bytes(key).map_err(|e| StoreError::Corrupt(format!("history key: {e}")))?;
    let (tombstone, kv) = decode_history_value(value)?;
    Ok(HistoryRecord { revision, tombstone, kv })
}

/// Encodes an i64 meta value.
pub fn encode_i64(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// Decodes an i64 meta value.
pub fn decode_i64(bytes: &[u8]) -> Result<i64, StoreError> {
    let arr: [u8; 8] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("meta integer of {} bytes", bytes.len())))?;
    Ok(i64::from_be_bytes(arr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_value_round_trips_and_rejects_garbage() {
        let kv = KeyValue {
            key: Bytes::from_static(b"k"),
            create_revision: 2,
            mod_revision: 3,
            version: 2,
            value: Bytes::from_static(b"v"),
            lease: 7,
        };
        for tombstone in [false, true] {
            let enc = encode_history_value(tombstone, &kv);
            assert_eq!(decode_history_value(&enc), Ok((tombstone, kv.clone())));
        }
        assert!(decode_history_value(b"").is_err());
        assert!(decode_history_value(b"x").is_err());
        assert!(decode_history_value(&[PUT_KIND, 0xff, 0xff]).is_err());
        assert!(decode_i64(b"123").is_err());
        assert_eq!(decode_i64(&encode_i64(-5)), Ok(-5));
    }
}
