//! Checks that need no state, in the order etcd's gRPC layer makes them, so the first error a
//! bad request meets is the one etcd would answer with.

use std::collections::HashSet;

use actcd_proto::etcdserverpb::{
    request_op, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};

use super::error::StoreError;

/// etcd's `checkRangeRequest`.
pub fn check_range(req: &RangeRequest) -> Result<(), StoreError> {
    // etcd 3.4 does not check the sort enums: an unknown order leaves the result unsorted.
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
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

/// A deleted interval as etcd's interval tree sees it: `[begin, end)`, or the single key `begin`.
struct Deleted {
    begin: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl Deleted {
    fn contains(&self, key: &[u8]) -> bool {
        match &self.end {
            None => key == self.begin.as_slice(),
            // A from-key delete ("\0" end) is an empty interval to etcd's affine comparison, so
            // etcd lets a put inside it pass; actcd does the same.
            Some(end) => self.begin.as_slice() <= key && key < end.as_slice(),
        }
    }
}

/// The keys a branch puts (including nested txns) and the ranges it deletes.
struct BranchKeys {
    puts: HashSet<Vec<u8>>,
    dels: Vec<Deleted>,
}

fn check_branch_keys(ops: &[RequestOp]) -> Result<(), StoreError> {
    branch_keys(ops).map(|_| ())
}

/// etcd's `checkIntervals`: a branch may not put a key twice or put a key it deletes. The two
/// branches of a nested txn exclude each other, so they may put the same key.
fn branch_keys(ops: &[RequestOp]) -> Result<BranchKeys, StoreError> {
    let mut dels: Vec<Deleted> = ops
        .iter()
        .filter_map(|op| match &op.request {
            Some(request_op::Request::RequestDeleteRange(d)) => Some(Deleted {
                begin: d.key.to_vec(),
                end: (!d.range_end.is_empty()).then(|| d.range_end.to_vec()),
            }),
            _ => None,
        })
        .collect();
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(request_op::Request::RequestTxn(txn)) = &op.request else {
            continue;
        };
        let then_keys = branch_keys(&txn.success)?;
        let else_keys = branch_keys(&txn.failure)?;
        for key in &then_keys.puts {
            if puts.contains(key) || dels.iter().any(|d| d.contains(key)) {
                return Err(StoreError::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        for key in &else_keys.puts {
            if (puts.contains(key) && !then_keys.puts.contains(key)) || dels.iter().any(|d| d.contains(key)) {
                return Err(StoreError::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        dels.extend(then_keys.dels);
        dels.extend(else_keys.dels);
    }
    for op in ops {
        let Some(request_op::Request::RequestPut(put)) = &op.request else {
            continue;
        };
        let key = put.key.to_vec();
        if puts.contains(&key) || dels.iter().any(|d| d.contains(&key)) {
            return Err(StoreError::DuplicateKey);
        }
        puts.insert(key);
    }
    Ok(BranchKeys { puts, dels })
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
}
