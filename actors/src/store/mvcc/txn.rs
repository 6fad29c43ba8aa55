//! Transactions and the writes inside them.
//!
//! Every write command runs as one transaction at revision `begin + 1`: each change takes the
//! next sub-revision, reads see the changes made so far, and the store revision moves only if
//! something changed. Compares (of nested txns too) are all decided up front against the view
//! at `begin`, as etcd does.

use std::collections::HashMap;

use bytes::Bytes;

use actcd_proto::etcdserverpb::{
    request_op, response_op, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use super::codec::encode_history_value;
use super::engine::{Engine, Family, WriteSet};
use super::error::StoreError;
use super::index::Index;
use super::lease_index::LeaseIndex;
use super::range::{self, ValueSource, View};
use super::revision::Revision;

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

/// The changes of one group-commit batch that are not yet on disk.
#[derive(Default)]
pub struct Batch {
    /// What the commit writes.
    pub writes: WriteSet,
    /// Values written by this batch, so that later commands of the batch can read them.
    pub overlay: HashMap<Revision, KeyValue>,
    /// Commands applied into this batch.
    pub commands: u64,
    /// The events of the batch's changes in revision order, published after the commit.
    pub events: Vec<Event>,
    /// A compaction applied into this batch: readers see it (and the index drops what it
    /// removes) only once its record is durable, so a crash before the fsync can never have
    /// answered ErrCompacted for history that is still there after the restart.
    pub compaction: Option<i64>,
}

/// One write transaction at revision `begin + 1`.
pub struct TxnCtx<'a, E: Engine> {
    /// The index, locked for writing for the whole transaction.
    pub index: &'a mut Index,
    /// Leases and their keys.
    pub leases: &'a mut LeaseIndex,
    /// Where committed values live.
    pub engine: &'a E,
    /// The batch the changes go into.
    pub batch: &'a mut Batch,
    /// The store revision before this transaction.
    pub begin: i64,
    /// The compaction revision.
    pub compacted: i64,
    /// Changes made so far (the next sub-revision).
    pub changes: i64,
}

struct OverlaySource<'b, E: Engine> {
    overlay: &'b HashMap<Revision, KeyValue>,
    engine: &'b E,
}

impl<E: Engine> ValueSource for OverlaySource<'_, E> {
    fn load(&self, revisions: &[Revision]) -> Result<Vec<Option<KeyValue>>, StoreError> {
        let missing: Vec<Revision> =
            revisions.iter().filter(|r| !self.overlay.contains_key(r)).copied().collect();
        let mut stored = range::load_from_engine(self.engine, &missing)?.into_iter();
        Ok(revisions
            .iter()
            .map(|r| match self.overlay.get(r) {
                Some(kv) => Some(kv.clone()),
                None => stored.next().flatten(),
            })
            .collect())
    }
}

impl<E: Engine> View for TxnCtx<'_, E> {
    fn current(&self) -> i64 {
        self.read_rev()
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        metrics::counter!("etcd_mvcc_range_total").increment(1);
        let cur = self.read_rev();
        let at = range::read_revision(req.revision, cur, self.compacted)?;
        let plan = range::plan_range(self.index, req, at);
        let kvs = range::load_values(&self.source(), &plan)?;
        Ok(range::finish_range(req, kvs, plan.count, cur))
    }
}

impl<E: Engine> TxnCtx<'_, E> {
    /// The revision the transaction's reads see: its own changes once it has made some.
    pub fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }

    fn source(&self) -> OverlaySource<'_, E> {
        OverlaySource { overlay: &self.batch.overlay, engine: self.engine }
    }

    fn next_revision(&mut self) -> Result<Revision, StoreError> {
        let rev = Revision { main: self.begin + 1, sub: self.changes };
        rev.pack(false).map_err(|_| StoreError::TooManyChanges)?;
        self.changes += 1;
        Ok(rev)
    }

    fn live(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        let req = RangeRequest { key: Bytes::copy_from_slice(key), ..Default::default() };
        Ok(View::range(self, &req)?.kvs.into_iter().next())
    }

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

    /// Applies a put.
    pub fn put(&mut self, req: &PutRequest) -> Result<PutResponse, StoreError> {
        metrics::counter!("etcd_mvcc_put_total").increment(1);
        self.check_lease(req.lease)?;
        // A revoke deletes all of a lease's keys in one revision: it must stay possible.
        if self.leases.is_full_for(&req.key, req.lease, Revision::MAX_SUB as usize + 1) {
            return Err(StoreError::TooManyChanges);
        }
        let prev =
            if req.ignore_value || req.ignore_lease || req.prev_kv { self.live(&req.key)? } else { None };
        if (req.ignore_value || req.ignore_lease) && prev.is_none() {
            return Err(StoreError::KeyNotFound);
        }
        let value = match (&prev, req.ignore_value) {
            (Some(p), true) => p.value.clone(),
            _ => req.value.clone(),
        };
        let lease = match (&prev, req.ignore_lease) {
            (Some(p), true) => p.lease,
            _ => req.lease,
        };
        let existing = self.index.get(&req.key, self.read_rev());
        let rev = self.next_revision()?;
        let (create_revision, version) = match existing {
            Some(at) => (at.create_revision.main, at.version + 1),
            None => (rev.main, 1),
        };
        let kv =
            KeyValue { key: req.key.clone(), create_revision, mod_revision: rev.main, version, value, lease };
        self.record(rev, false, kv);
        self.index.put(&req.key, rev);
        self.leases.attach(&req.key, lease);
        Ok(PutResponse {
            header: Some(ResponseHeader { revision: rev.main, ..Default::default() }),
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    /// Applies a delete of a key or range.
    pub fn delete(&mut self, req: &DeleteRangeRequest) -> Result<DeleteRangeResponse, StoreError> {
        metrics::counter!("etcd_mvcc_delete_total").increment(1);
        let at = self.read_rev();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut revisions = Vec::new();
        self.index.range(&req.key, &req.range_end, at, 0, |key, found| {
            keys.push(key.to_vec());
            revisions.push(found.mod_revision);
        });
        // One revision holds at most MAX_SUB + 1 changes. Running out half way would be a
        // failure after a change, which stops the writer: refuse the delete before it starts.
        if self.changes.saturating_add(keys.len() as i64) > Revision::MAX_SUB + 1 {
            return Err(StoreError::TooManyChanges);
        }
        let prev_kvs = if req.prev_kv {
            self.source()
                .load(&revisions)?
                .into_iter()
                .map(|kv| kv.ok_or(StoreError::Compacted))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        for key in &keys {
            self.tombstone(key)?;
        }
        Ok(DeleteRangeResponse {
            header: Some(ResponseHeader { revision: self.read_rev(), ..Default::default() }),
            deleted: keys.len() as i64,
            prev_kvs,
        })
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

    fn check_lease(&self, lease: i64) -> Result<(), StoreError> {
        if lease != 0 && !self.leases.exists(lease) {
            return Err(StoreError::LeaseNotFound);
        }
        Ok(())
    }

    /// Deletes one live key at the next sub-revision: a tombstone record, the index, its lease.
    fn tombstone(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let rev = self.next_revision()?;
        let kv = KeyValue { key: Bytes::copy_from_slice(key), mod_revision: rev.main, ..Default::default() };
        self.record(rev, true, kv);
        self.index.tombstone(key, rev).map_err(|e| StoreError::Corrupt(format!("index tombstone: {e}")))?;
        self.leases.detach(key);
        Ok(())
    }

    /// Deletes `keys` (those live now), each at the next sub-revision: a revoked lease's keys.
    pub fn delete_keys(&mut self, keys: &[Box<[u8]>]) -> Result<(), StoreError> {
        for key in keys {
            if self.index.get(key, self.read_rev()).is_none() {
                continue;
            }
            self.tombstone(key)?;
        }
        Ok(())
    }

    fn record(&mut self, rev: Revision, tombstone: bool, kv: KeyValue) {
        self.batch.writes.put(
            Family::History,
            rev.to_key_bytes().to_vec(),
            encode_history_value(tombstone, &kv),
        );
        let kind = if tombstone { EventType::Delete } else { EventType::Put };
        self.batch.events.push(Event { r#type: kind as i32, kv: Some(kv.clone()), prev_kv: None });
        self.batch.overlay.insert(rev, kv);
    }
}
