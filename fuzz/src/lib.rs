//! Builds etcd requests out of the fuzzer's bytes. Keys come from a four-letter alphabet and
//! are at most three bytes long, so requests keep hitting the same keys, the empty key, "\0"
//! and "\xff" (the edges etcd's range ends treat specially); lease ids are mostly small, so
//! puts name leases that exist.
#![deny(missing_docs)]

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{Result, Unstructured};

use actcd_proto::key_range::prefix_end;
use actcd_proto::etcdserverpb::{
    compare, request_op, AlarmRequest, CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest,
    LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};

use actcd_store::Command;

/// Nesting of generated txns; prost's decoder allows far more, the raw-bytes path covers that.
const MAX_TXN_DEPTH: u32 = 3;
/// Ops per generated branch or compare list.
const MAX_BRANCH_OPS: u32 = 5;

/// A key of 0..=3 bytes from {0x00, 'a', 'b', 0xff}; empty one time in sixteen.
pub fn key(u: &mut Unstructured<'_>) -> Result<Bytes> {
    if u.ratio(1, 16)? {
        return Ok(Bytes::new());
    }
    let len = u.int_in_range(1..=3)?;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        out.push(*u.choose(&[0x00, b'a', b'b', 0xff])?);
    }
    Ok(out.into())
}

/// A range end for `key`: none, "\0" (from the key on), the key's prefix end, or another key.
pub fn range_end(u: &mut Unstructured<'_>, key: &[u8]) -> Result<Bytes> {
    Ok(match u.int_in_range(0..=3)? {
        0 => Bytes::new(),
        1 => Bytes::from_static(b"\0"),
        2 => prefix_end(key).into(),
        _ => self::key(u)?,
    })
}

/// A lease id: one of 0..=4 mostly, anything sometimes.
pub fn lease(u: &mut Unstructured<'_>) -> Result<i64> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    u.int_in_range(0..=4)
}

/// A revision near `current` (or anything, sometimes).
pub fn revision(u: &mut Unstructured<'_>, current: i64) -> Result<i64> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    Ok(current + i64::from(u.int_in_range(-4i8..=1)?))
}

/// A small value.
pub fn value(u: &mut Unstructured<'_>) -> Result<Bytes> {
    let len = u.int_in_range(0..=8)?;
    Ok(u.bytes(len)?.to_vec().into())
}

/// A Range with every option drawn.
pub fn range(u: &mut Unstructured<'_>, current: i64) -> Result<RangeRequest> {
    let key = key(u)?;
    Ok(RangeRequest {
        range_end: range_end(u, &key)?,
        key,
        limit: if u.ratio(1, 3)? { i64::from(u.int_in_range(-1i8..=3)?) } else { 0 },
        revision: if u.ratio(1, 3)? { revision(u, current)? } else { 0 },
        sort_order: if u.ratio(1, 3)? { u.int_in_range(0..=3)? } else { 0 },
        sort_target: if u.ratio(1, 3)? { u.int_in_range(0..=5)? } else { 0 },
        serializable: u.arbitrary()?,
        keys_only: u.arbitrary()?,
        count_only: u.ratio(1, 6)?,
        min_mod_revision: if u.ratio(1, 6)? { revision(u, current)? } else { 0 },
        max_mod_revision: if u.ratio(1, 6)? { revision(u, current)? } else { 0 },
        min_create_revision: if u.ratio(1, 6)? { revision(u, current)? } else { 0 },
        max_create_revision: if u.ratio(1, 6)? { revision(u, current)? } else { 0 },
    })
}

/// A Put; the ignore flags are rare, as they are in real traffic.
pub fn put(u: &mut Unstructured<'_>) -> Result<PutRequest> {
    let ignore_value = u.ratio(1, 6)?;
    let ignore_lease = u.ratio(1, 6)?;
    // Mostly what etcd accepts with the ignore flags: no value, no lease.
    let value = if ignore_value && u.ratio(7, 8)? { Bytes::new() } else { value(u)? };
    let lease = if ignore_lease && u.ratio(7, 8)? || u.ratio(2, 3)? { 0 } else { lease(u)? };
    Ok(PutRequest { key: key(u)?, value, lease, prev_kv: u.arbitrary()?, ignore_value, ignore_lease })
}

/// A DeleteRange.
pub fn delete(u: &mut Unstructured<'_>) -> Result<DeleteRangeRequest> {
    let key = key(u)?;
    Ok(DeleteRangeRequest { range_end: range_end(u, &key)?, key, prev_kv: u.arbitrary()? })
}

/// A Compare with any target, result and operand (including out-of-range enum values).
pub fn compare(u: &mut Unstructured<'_>, current: i64) -> Result<Compare> {
    use compare::TargetUnion;
    let key = key(u)?;
    let target = u.int_in_range(0..=5)?;
    let target_union = match u.int_in_range(0..=5)? {
        0 => None,
        1 => Some(TargetUnion::Version(i64::from(u.int_in_range(-1i8..=3)?))),
        2 => Some(TargetUnion::CreateRevision(revision(u, current)?)),
        3 => Some(TargetUnion::ModRevision(revision(u, current)?)),
        4 => Some(TargetUnion::Value(value(u)?)),
        _ => Some(TargetUnion::Lease(lease(u)?)),
    };
    Ok(Compare {
        result: u.int_in_range(0..=4)?,
        target,
        range_end: if u.ratio(1, 3)? { range_end(u, &key)? } else { Bytes::new() },
        key,
        target_union,
    })
}

/// A Txn, nesting at most `depth` more levels.
pub fn txn(u: &mut Unstructured<'_>, current: i64, depth: u32) -> Result<TxnRequest> {
    let compares = u.int_in_range(0..=MAX_BRANCH_OPS)?;
    let compare = (0..compares).map(|_| compare(u, current)).collect::<Result<_>>()?;
    let success = branch(u, current, depth)?;
    let failure = branch(u, current, depth)?;
    Ok(TxnRequest { compare, success, failure })
}

fn branch(u: &mut Unstructured<'_>, current: i64, depth: u32) -> Result<Vec<RequestOp>> {
    let ops = u.int_in_range(0..=MAX_BRANCH_OPS)?;
    (0..ops).map(|_| request_op(u, current, depth)).collect()
}

fn request_op(u: &mut Unstructured<'_>, current: i64, depth: u32) -> Result<RequestOp> {
    use request_op::Request;
    let request = match u.int_in_range(0..=8)? {
        0 | 1 => Some(Request::RequestRange(range(u, current)?)),
        2..=4 => Some(Request::RequestPut(put(u)?)),
        5 | 6 => Some(Request::RequestDeleteRange(delete(u)?)),
        7 if depth < MAX_TXN_DEPTH => Some(Request::RequestTxn(txn(u, current, depth + 1)?)),
        _ => None,
    };
    Ok(RequestOp { request })
}

/// A write command as a client (or the lease actor) would send it to the store's writer.
pub fn command(u: &mut Unstructured<'_>, current: i64) -> Result<Command> {
    Ok(match u.int_in_range(0..=11)? {
        0..=2 => Command::Put(put(u)?),
        3 | 4 => Command::DeleteRange(delete(u)?),
        5..=7 => Command::Txn(txn(u, current, 0)?),
        8 => {
            Command::Compact(CompactionRequest { revision: revision(u, current)?, physical: u.arbitrary()? })
        }
        9 => Command::LeaseGrant(LeaseGrantRequest {
            ttl: if u.ratio(1, 4)? { u.arbitrary()? } else { i64::from(u.int_in_range(-1i8..=100)?) },
            id: lease(u)?,
        }),
        10 => Command::LeaseRevoke(LeaseRevokeRequest { id: lease(u)? }),
        // GET, ACTIVATE, DEACTIVATE or an unknown action; of NONE, NOSPACE, CORRUPT or an
        // unknown type; by one of two members.
        _ => Command::Alarm(AlarmRequest {
            action: u.int_in_range(0..=3)?,
            member_id: u.int_in_range(1..=2)?,
            alarm: u.int_in_range(0..=3)?,
        }),
    })
}
