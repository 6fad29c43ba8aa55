//! Checks that need no state, in the order etcd's gRPC layer makes them, so the first error a
//! bad request meets is the one etcd would answer with.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound::{Included, Unbounded};

use actcd_proto::etcdserverpb::{
    request_op, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use actcd_proto::key_range::KeyRange;

use crate::error::StoreError;

/// etcd's `checkRangeRequest`.
pub fn check_range(req: &RangeRequest) -> Result<(), StoreError> {
    // etcd 3.4 does not check the sort enums: an unknown order leaves the result unsorted.
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(())
}

/// etcd 3.7's `checkRangeStreamRequest`: its `checkRangeRequest` (which, unlike 3.4's, checks
/// the sort enums), then what a stream cannot do. It reads in key order a chunk at a time, so
/// sorting by anything else or filtering by revision would need the whole range first.
pub fn check_range_stream(req: &RangeRequest) -> Result<(), StoreError> {
    check_range(req)?;
    if !(0..=2).contains(&req.sort_order) || !(0..=4).contains(&req.sort_target) {
        return Err(StoreError::InvalidSortOption);
    }
    // NONE or KEY ASCEND (etcd's IsDefaultOrdering); NONE with another target is served in
    // key order, see docs/compatibility.md.
    if !(req.sort_order == 0 || (req.sort_target == 0 && req.sort_order == 1)) {
        return Err(StoreError::StreamSort);
    }
    if req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0
    {
        return Err(StoreError::StreamRevisionFilters);
    }
    Ok(())
}

/// etcd's `checkPutRequest`.
pub fn check_put(req: &PutRequest) -> Result<(), StoreError> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if req.ignore_value && !req.value.is_empty() {
        return Err(StoreError::ValueProvided);
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(StoreError::LeaseProvided);
    }
    Ok(())
}

/// etcd's `checkDeleteRequest`.
pub fn check_delete(req: &DeleteRangeRequest) -> Result<(), StoreError> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    Ok(())
}

/// etcd's `checkTxnRequest` followed by its duplicate-key check on both branches.
pub fn check_txn(req: &TxnRequest, max_txn_ops: usize) -> Result<(), StoreError> {
    check_txn_shape(req, max_txn_ops)?;
    check_branch_keys(&req.success)?;
    check_branch_keys(&req.failure)?;
    Ok(())
}

fn check_txn_shape(req: &TxnRequest, max_txn_ops: usize) -> Result<(), StoreError> {
    let ops = req.compare.len().max(req.success.len()).max(req.failure.len());
    if ops > max_txn_ops {
        return Err(StoreError::TooManyOps);
    }
    if req.compare.iter().any(|c| c.key.is_empty()) {
        return Err(StoreError::EmptyKey);
    }
    for op in req.success.iter().chain(&req.failure) {
        check_op(op, max_txn_ops)?;
    }
    Ok(())
}

fn check_op(op: &RequestOp, max_txn_ops: usize) -> Result<(), StoreError> {
    match &op.request {
        Some(request_op::Request::RequestRange(r)) => check_range(r),
        Some(request_op::Request::RequestPut(r)) => check_put(r),
        Some(request_op::Request::RequestDeleteRange(r)) => check_delete(r),
        Some(request_op::Request::RequestTxn(r)) => check_txn_shape(r, max_txn_ops),
        None => Err(StoreError::KeyNotFound),
    }
}

/// The ranges a branch deletes, as etcd's interval tree answers "does a delete cover this key".
/// Ranges are merged as they are added, so a lookup is one ordered-map probe however many
/// deletes a request holds (a linear scan per put made a crafted txn quadratic).
#[derive(Default)]
struct Deleted {
    /// Single-key deletes.
    keys: HashSet<Vec<u8>>,
    /// `[begin, end)` ranges, disjoint: begin -> end.
    ranges: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The lowest start of a from-key delete (range end "\0"). etcd's check sees an empty
    /// interval there and lets a put inside it pass, and actcd does the same; but the delete
    /// removes every key from its start on, which a put that reads its old value must know.
    from_key: Option<Vec<u8>>,
}

impl Deleted {
    fn add(&mut self, begin: &[u8], end: &[u8]) {
        match KeyRange::new(begin, end) {
            KeyRange::Key(key) => {
                self.keys.insert(key.to_vec());
            }
            KeyRange::From(begin) => {
                if self.from_key.as_deref().is_none_or(|lowest| begin < lowest) {
                    self.from_key = Some(begin.to_vec());
                }
            }
            KeyRange::Between(begin, end) => self.add_range(begin.to_vec(), end.to_vec()),
        }
    }

    fn add_range(&mut self, mut begin: Vec<u8>, mut end: Vec<u8>) {
        if begin >= end {
            return;
        }
        if let Some((before, before_end)) =
            self.ranges.range::<[u8], _>((Unbounded, Included(begin.as_slice()))).next_back()
        {
            if *before_end >= begin {
                if *before_end >= end {
                    return;
                }
                begin = before.clone();
            }
        }
        let overlapped: Vec<Vec<u8>> = self
            .ranges
            .range::<[u8], _>((Included(begin.as_slice()), Included(end.as_slice())))
            .map(|(b, _)| b.clone())
            .collect();
        for start in overlapped {
            if let Some(old_end) = self.ranges.remove(&start) {
                end = end.max(old_end);
            }
        }
        self.ranges.insert(begin, end);
    }

    fn extend(&mut self, other: Deleted) {
        self.keys.extend(other.keys);
        for (begin, end) in other.ranges {
            self.add_range(begin, end);
        }
        if let Some(begin) = other.from_key {
            self.add(&begin, b"\0");
        }
    }

    /// Whether etcd's duplicate-key check sees `key` as deleted.
    fn contains(&self, key: &[u8]) -> bool {
        self.keys.contains(key)
            || self
                .ranges
                .range::<[u8], _>((Unbounded, Included(key)))
                .next_back()
                .is_some_and(|(_, end)| key < end.as_slice())
    }

    /// Whether a from-key delete removes `key`.
    fn deleted_from_key(&self, key: &[u8]) -> bool {
        self.from_key.as_deref().is_some_and(|lowest| lowest <= key)
    }
}

/// The keys a branch puts (including nested txns), those of them that read the key's old value
/// (ignore_value / ignore_lease), and the ranges it deletes.
struct BranchKeys {
    puts: HashSet<Vec<u8>>,
    reading: HashSet<Vec<u8>>,
    dels: Deleted,
}

/// etcd's duplicate-key check, and one more: a put that reads the key's old value may not sit
/// inside a from-key delete of the same branch. etcd 3.4 lets that through and then fails the
/// txn half applied (its applier panics); actcd would have to stop taking writes. It gets the
/// error etcd gives such a put inside any other delete.
fn check_branch_keys(ops: &[RequestOp]) -> Result<(), StoreError> {
    let keys = branch_keys(ops)?;
    if keys.reading.iter().any(|key| keys.dels.deleted_from_key(key)) {
        return Err(StoreError::DuplicateKey);
    }
    Ok(())
}

/// etcd's `checkIntervals`: a branch may not put a key twice or put a key it deletes. The two
/// branches of a nested txn exclude each other, so they may put the same key.
fn branch_keys(ops: &[RequestOp]) -> Result<BranchKeys, StoreError> {
    let mut dels = Deleted::default();
    for op in ops {
        if let Some(request_op::Request::RequestDeleteRange(d)) = &op.request {
            dels.add(&d.key, &d.range_end);
        }
    }
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    let mut reading: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(request_op::Request::RequestTxn(txn)) = &op.request else {
            continue;
        };
        let then_keys = branch_keys(&txn.success)?;
        let else_keys = branch_keys(&txn.failure)?;
        for key in &then_keys.puts {
            if puts.contains(key) || dels.contains(key) {
                return Err(StoreError::DuplicateKey);
            }
        }
        puts.extend(then_keys.puts.iter().cloned());
        for key in &else_keys.puts {
            if (puts.contains(key) && !then_keys.puts.contains(key)) || dels.contains(key) {
                return Err(StoreError::DuplicateKey);
            }
        }
        puts.extend(else_keys.puts);
        reading.extend(then_keys.reading);
        reading.extend(else_keys.reading);
        dels.extend(then_keys.dels);
        dels.extend(else_keys.dels);
    }
    for op in ops {
        let Some(request_op::Request::RequestPut(put)) = &op.request else {
            continue;
        };
        let key = put.key.to_vec();
        if puts.contains(&key) || dels.contains(&key) {
            return Err(StoreError::DuplicateKey);
        }
        if put.ignore_value || put.ignore_lease {
            reading.insert(key.clone());
        }
        puts.insert(key);
    }
    Ok(BranchKeys { puts, reading, dels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn put(key: &'static [u8]) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: Bytes::from_static(key),
                ..Default::default()
            })),
        }
    }

    fn del(key: &'static [u8], end: &'static [u8]) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: Bytes::from_static(key),
                range_end: Bytes::from_static(end),
                ..Default::default()
            })),
        }
    }

    fn txn(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
        TxnRequest { compare: vec![], success, failure }
    }

    #[test]
    fn duplicate_keys_follow_etcd() {
        assert_eq!(check_txn(&txn(vec![put(b"a"), put(b"a")], vec![]), 128), Err(StoreError::DuplicateKey));
        assert_eq!(check_txn(&txn(vec![put(b"a")], vec![put(b"a")]), 128), Ok(()));
        assert_eq!(
            check_txn(&txn(vec![del(b"a", b"c"), put(b"b")], vec![]), 128),
            Err(StoreError::DuplicateKey)
        );
        assert_eq!(check_txn(&txn(vec![del(b"a", b"c"), put(b"c")], vec![]), 128), Ok(()));
        assert_eq!(check_txn(&txn(vec![del(b"a", b"\0"), put(b"b")], vec![]), 128), Ok(()));
        let nested = RequestOp {
            request: Some(request_op::Request::RequestTxn(txn(vec![put(b"x")], vec![put(b"x")]))),
        };
        assert_eq!(check_txn(&txn(vec![nested.clone()], vec![]), 128), Ok(()));
        assert_eq!(check_txn(&txn(vec![nested, put(b"x")], vec![]), 128), Err(StoreError::DuplicateKey));
    }

    fn nested(ops: Vec<RequestOp>) -> RequestOp {
        RequestOp { request: Some(request_op::Request::RequestTxn(txn(ops, vec![]))) }
    }

    fn reading_put(key: &'static [u8]) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: Bytes::from_static(key),
                ignore_value: true,
                ..Default::default()
            })),
        }
    }

    /// Found by fuzz/store_apply: the put found its key gone half way through the txn, and
    /// the store stopped taking writes.
    #[test]
    fn a_reading_put_inside_a_from_key_delete_is_refused() {
        for ops in [
            vec![del(b"a", b"\0"), reading_put(b"b")],
            vec![reading_put(b"b"), del(b"a", b"\0")],
            vec![nested(vec![del(b"a", b"\0")]), reading_put(b"b")],
            vec![del(b"a", b"\0"), nested(vec![reading_put(b"a")])],
        ] {
            assert_eq!(check_txn(&txn(ops, vec![]), 128), Err(StoreError::DuplicateKey));
        }
        // Below the delete's start, or in the other branch, it is fine.
        assert_eq!(check_txn(&txn(vec![del(b"b", b"\0"), reading_put(b"a")], vec![]), 128), Ok(()));
        assert_eq!(check_txn(&txn(vec![del(b"a", b"\0")], vec![reading_put(b"b")]), 128), Ok(()));
    }

    #[test]
    fn merged_ranges_answer_like_the_list_they_replace() {
        let mut dels = Deleted::default();
        for (b, e) in [("c", "e"), ("a", "b"), ("d", "g"), ("b", "c"), ("x", "y"), ("m", "m"), ("q", "p")] {
            dels.add(b.as_bytes(), e.as_bytes());
        }
        dels.add(b"k", b"");
        for (key, inside) in [
            ("a", true),
            ("b", true),
            ("f", true),
            ("g", false),
            ("k", true),
            ("m", false),
            ("p", false),
            ("x", true),
            ("y", false),
        ] {
            assert_eq!(dels.contains(key.as_bytes()), inside, "{key}");
        }
    }

    /// A txn of 61k deletes and 61k puts in nested txns (about 1.5 MB, under the request size
    /// limit): the check took seconds on the single writer when each put scanned every delete.
    #[test]
    fn many_nested_deletes_and_puts_check_quickly() {
        fn op_key(prefix: char, i: usize) -> Bytes {
            Bytes::from(format!("{prefix}{i:06}"))
        }
        let level = |make: &dyn Fn(usize) -> RequestOp| -> RequestOp {
            nested(
                (0..4)
                    .map(|a| {
                        nested(
                            (0..120)
                                .map(|b| nested((0..128).map(|c| make((a * 120 + b) * 128 + c)).collect()))
                                .collect(),
                        )
                    })
                    .collect(),
            )
        };
        let dels = level(&|i| RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: op_key('d', i),
                range_end: Bytes::from(format!("d{i:06}\0")),
                ..Default::default()
            })),
        });
        let puts = level(&|i| RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: op_key('p', i),
                ..Default::default()
            })),
        });
        let req = txn(vec![dels, puts], vec![]);
        let started = std::time::Instant::now();
        assert_eq!(check_txn(&req, 128), Ok(()));
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "check took {took:?}");
    }

    #[test]
    fn shape_errors_come_in_etcd_order() {
        let many = (0..129).map(|_| put(b"")).collect();
        assert_eq!(check_txn(&txn(many, vec![]), 128), Err(StoreError::TooManyOps));
        assert_eq!(check_txn(&txn(vec![put(b"")], vec![]), 128), Err(StoreError::EmptyKey));
        assert_eq!(
            check_txn(&txn(vec![RequestOp { request: None }], vec![]), 128),
            Err(StoreError::KeyNotFound)
        );
        let bad_put = RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: Bytes::from_static(b"k"),
                value: Bytes::from_static(b"v"),
                ignore_value: true,
                ..Default::default()
            })),
        };
        assert_eq!(check_txn(&txn(vec![bad_put], vec![]), 128), Err(StoreError::ValueProvided));
    }

    /// Each refusal wins over the ones etcd checks after it.
    #[test]
    fn range_stream_refusals_come_in_etcds_order() {
        let req = |key: &'static [u8], order: i32, target: i32, min_mod: i64| RangeRequest {
            key: Bytes::from_static(key),
            sort_order: order,
            sort_target: target,
            min_mod_revision: min_mod,
            ..Default::default()
        };
        assert_eq!(check_range_stream(&req(b"", 9, 9, 1)), Err(StoreError::EmptyKey));
        assert_eq!(check_range_stream(&req(b"a", 3, 0, 1)), Err(StoreError::InvalidSortOption));
        assert_eq!(check_range_stream(&req(b"a", 0, 5, 1)), Err(StoreError::InvalidSortOption));
        assert_eq!(check_range_stream(&req(b"a", 2, 0, 1)), Err(StoreError::StreamSort));
        assert_eq!(check_range_stream(&req(b"a", 1, 3, 0)), Err(StoreError::StreamSort));
        assert_eq!(check_range_stream(&req(b"a", 1, 0, 1)), Err(StoreError::StreamRevisionFilters));
        assert_eq!(check_range_stream(&req(b"a", 1, 0, 0)), Ok(()));
        assert_eq!(check_range_stream(&req(b"a", 0, 2, 0)), Ok(()));
    }
}
