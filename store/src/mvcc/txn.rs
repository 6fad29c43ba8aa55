//! Transactions: the compares of a txn and of every nested txn on its taken path, all decided
//! up front against the view at the txn's start, as etcd does; the checks etcd makes on the
//! taken path before anything changes; then the path's ops in order. Its puts and deletes are
//! [`crate::mvcc::put_delete`]'s; a txn that writes nothing is served by the readers.

use actcd_proto::etcdserverpb::{
    request_op, response_op, DeleteRangeRequest, PutRequest, RequestOp, ResponseHeader, ResponseOp,
    TxnRequest, TxnResponse,
};

use crate::backend::engine::Engine;
use crate::error::StoreError;
use crate::mvcc::put_delete::WriteTxn;
use crate::mvcc::range::{self, View};
use crate::mvcc::revision::Revision;

/// Which branch each txn takes: the outer one and, in order, every nested txn on the taken path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    succeeded: bool,
    nested: Vec<Decision>,
}

/// Evaluates the compares of `txn` and of every nested txn on the path taken.
pub fn decide(view: &impl View, txn: &TxnRequest) -> Result<Decision, StoreError> {
    let mut succeeded = true;
    for cmp in &txn.compare {
        let kvs = view.range(&range::compare_range(cmp))?.kvs;
        if !range::compare_holds(cmp, &kvs) {
            succeeded = false;
            break;
        }
    }
    let mut nested = Vec::new();
    for op in branch(txn, succeeded) {
        if let Some(request_op::Request::RequestTxn(inner)) = &op.request {
            nested.push(decide(view, inner)?);
        }
    }
    Ok(Decision { succeeded, nested })
}

/// A write on a txn's taken path.
enum Write<'t> {
    Put(&'t PutRequest),
    Delete(&'t DeleteRangeRequest),
}

/// Visits the puts and deletes on the taken path of `txn`, nested txns included.
fn for_each_write<'t>(txn: &'t TxnRequest, decision: &Decision, visit: &mut impl FnMut(Write<'t>)) {
    let mut nested = decision.nested.iter();
    for op in branch(txn, decision.succeeded) {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) => visit(Write::Put(p)),
            Some(request_op::Request::RequestDeleteRange(d)) => visit(Write::Delete(d)),
            Some(request_op::Request::RequestTxn(inner)) => {
                if let Some(d) = nested.next() {
                    for_each_write(inner, d, visit);
                }
            }
            _ => {}
        }
    }
}

fn branch(txn: &TxnRequest, succeeded: bool) -> &[RequestOp] {
    if succeeded {
        &txn.success
    } else {
        &txn.failure
    }
}

/// True when no branch of `txn` (nested ones included) writes: such a txn is served by readers.
pub fn is_read_only(txn: &TxnRequest) -> bool {
    txn.success.iter().chain(&txn.failure).all(|op| match &op.request {
        Some(request_op::Request::RequestRange(_)) => true,
        Some(request_op::Request::RequestTxn(inner)) => is_read_only(inner),
        _ => false,
    })
}

/// True when every op of both branches is a serializable range, as etcd decides whether a
/// read-only txn skips the linearizable read (a nested txn never does).
pub fn is_serializable(txn: &TxnRequest) -> bool {
    txn.success.iter().chain(&txn.failure).all(|op| match &op.request {
        Some(request_op::Request::RequestRange(range)) => range.serializable,
        _ => false,
    })
}

/// Runs a read-only txn on `view`.
pub fn run_read_only(view: &impl View, txn: &TxnRequest) -> Result<TxnResponse, StoreError> {
    let decision = decide(view, txn)?;
    let mut resp = read_only_branch(view, txn, &decision)?;
    resp.header = Some(ResponseHeader { revision: view.current(), ..Default::default() });
    Ok(resp)
}

fn read_only_branch(
    view: &impl View,
    txn: &TxnRequest,
    decision: &Decision,
) -> Result<TxnResponse, StoreError> {
    let mut nested = decision.nested.iter();
    let mut responses = Vec::new();
    for op in branch(txn, decision.succeeded) {
        let response = match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                response_op::Response::ResponseRange(view.range(r)?)
            }
            Some(request_op::Request::RequestTxn(inner)) => {
                let d = nested.next().ok_or(StoreError::KeyNotFound)?;
                response_op::Response::ResponseTxn(read_only_branch(view, inner, d)?)
            }
            _ => return Err(StoreError::KeyNotFound),
        };
        responses.push(ResponseOp { response: Some(response) });
    }
    Ok(TxnResponse { header: Some(ResponseHeader::default()), succeeded: decision.succeeded, responses })
}

impl<E: Engine> WriteTxn<'_, E> {
    /// Checks what etcd checks before applying a txn's taken path: leases exist, keys named by
    /// ignore_value / ignore_lease exist, range revisions are readable.
    pub fn check_path(&self, txn: &TxnRequest, decision: &Decision) -> Result<(), StoreError> {
        let mut nested = decision.nested.iter();
        for op in branch(txn, decision.succeeded) {
            match &op.request {
                Some(request_op::Request::RequestPut(p)) => {
                    self.check_lease(p.lease)?;
                    if (p.ignore_value || p.ignore_lease) && self.live(&p.key)?.is_none() {
                        return Err(StoreError::KeyNotFound);
                    }
                }
                Some(request_op::Request::RequestRange(r)) if r.revision != 0 => {
                    range::read_revision(r.revision, self.begin, self.compacted)?;
                }
                Some(request_op::Request::RequestTxn(inner)) => {
                    let d = nested.next().ok_or(StoreError::KeyNotFound)?;
                    self.check_path(inner, d)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Refuses, before anything changes, a taken path whose changes might not fit one revision
    /// (`Revision::MAX_SUB` + 1 changes), or that might give a lease more keys than its revoke
    /// can delete in one revision: running out half way would stop the writer. Upper bounds: a
    /// put makes one change and may add one key to a delete's range or to a lease; a delete
    /// changes at most the keys in its range now plus every put of the path. A lone delete
    /// checks itself, before its first change.
    pub fn check_fits_one_revision(&self, txn: &TxnRequest, decision: &Decision) -> Result<(), StoreError> {
        let (mut puts, mut deletes) = (0i64, 0i64);
        for_each_write(txn, decision, &mut |write| match write {
            Write::Put(_) => puts += 1,
            Write::Delete(_) => deletes += 1,
        });
        let limit = Revision::MAX_SUB + 1;
        // Every key in the store bounds each delete and each lease: below 2^20 keys (nearly
        // every store) nothing needs looking at.
        let keys = self.index.len() as i64;
        if keys + puts <= limit && puts + deletes * (keys + puts) <= limit {
            return Ok(());
        }
        let mut bound = puts;
        let mut fits = true;
        for_each_write(txn, decision, &mut |write| match write {
            Write::Delete(delete) if puts + deletes > 1 => {
                let mut live = 0i64;
                self.index.range(&delete.key, &delete.range_end, self.read_rev(), 0, |_, _| live += 1);
                bound = bound.saturating_add(live + puts);
                fits &= bound <= limit;
            }
            Write::Put(put) if put.lease != 0 => {
                fits &= self.leases.key_count(put.lease) as i64 + puts <= limit;
            }
            _ => {}
        });
        if fits {
            Ok(())
        } else {
            Err(StoreError::TooManyChanges)
        }
    }

    /// Applies the taken path of a txn whose compares were decided up front.
    pub fn txn(&mut self, txn: &TxnRequest, decision: &Decision) -> Result<TxnResponse, StoreError> {
        let mut nested = decision.nested.iter();
        let mut responses = Vec::new();
        for op in branch(txn, decision.succeeded) {
            let response = match &op.request {
                Some(request_op::Request::RequestRange(r)) => {
                    response_op::Response::ResponseRange(View::range(self, r)?)
                }
                Some(request_op::Request::RequestPut(p)) => response_op::Response::ResponsePut(self.put(p)?),
                Some(request_op::Request::RequestDeleteRange(d)) => {
                    response_op::Response::ResponseDeleteRange(self.delete(d)?)
                }
                Some(request_op::Request::RequestTxn(inner)) => {
                    let d = nested.next().ok_or(StoreError::KeyNotFound)?;
                    response_op::Response::ResponseTxn(self.txn(inner, d)?)
                }
                None => return Err(StoreError::KeyNotFound),
            };
            responses.push(ResponseOp { response: Some(response) });
        }
        Ok(TxnResponse { header: Some(ResponseHeader::default()), succeeded: decision.succeeded, responses })
    }
}
