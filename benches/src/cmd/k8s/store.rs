//! The requests of the apiserver's etcd3 store (k8s.io/apiserver pkg/storage/etcd3/store.go), in
//! the shapes it sends them:
//! - Create: Txn(mod_revision(key) = 0) then Put, no else;
//! - GuaranteedUpdate: Txn(mod_revision(key) = seen) then Put else Get, retried with the Get's
//!   mod_revision on a conflict;
//! - Delete (conditionalDelete): the same with Delete in place of Put;
//! - a list page: Range over the type's prefix from a key, limit 500, at the revision of the
//!   first page (the continue token carries it);
//! - Count: a count_only Range over the type's prefix.

use crate::cmd::{compare, put_op, range_of, range_op};
use crate::conn::{bounded, Conn, OpError};
use crate::report::Recorder;
use actcd_proto::etcdserverpb::compare::{CompareResult, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse,
};
use actcd_proto::key_range::prefix_end;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Conflicts a GuaranteedUpdate or a delete retries before it gives up. The apiserver retries
/// without bound; here each object has one writer at a time, so a conflict means someone else
/// wrote it (a rerun's leftovers), and one retry with the fresh revision is enough.
const MAX_CONFLICTS: u32 = 3;

fn mod_revision_is(key: &Bytes, revision: i64) -> Compare {
    compare(key, CompareResult::Equal, TargetUnion::ModRevision(revision))
}

fn op(request: Request) -> RequestOp {
    RequestOp { request: Some(request) }
}

fn revision(r: &TxnResponse) -> i64 {
    r.header.as_ref().map_or(0, |h| h.revision)
}

/// Creates `key` if it does not exist; the revision it was written at, or an error when it
/// already existed.
pub async fn create(kv: &mut KvClient<Conn>, key: Bytes, value: Bytes, lease: i64) -> Result<i64, OpError> {
    let txn = TxnRequest {
        compare: vec![mod_revision_is(&key, 0)],
        success: vec![op(Request::RequestPut(PutRequest { key, value, lease, ..Default::default() }))],
        failure: Vec::new(),
    };
    let r = kv.txn(txn).await?.into_inner();
    if r.succeeded {
        Ok(revision(&r))
    } else {
        Err(OpError::new("create: the key exists"))
    }
}

/// What a conditional write did: its revision, and the conflicts it retried on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub revision: i64,
    pub conflicts: u32,
}

/// GuaranteedUpdate of `key`, last seen at `seen`, to `value`.
pub async fn update(
    kv: &mut KvClient<Conn>,
    key: &Bytes,
    seen: i64,
    value: Bytes,
) -> Result<Written, OpError> {
    conditional(kv, key, seen, put_op(key.clone(), value)).await
}

/// conditionalDelete of `key`, last seen at `seen`.
pub async fn delete(kv: &mut KvClient<Conn>, key: &Bytes, seen: i64) -> Result<Written, OpError> {
    let delete =
        op(Request::RequestDeleteRange(DeleteRangeRequest { key: key.clone(), ..Default::default() }));
    conditional(kv, key, seen, delete).await
}

async fn conditional(
    kv: &mut KvClient<Conn>,
    key: &Bytes,
    mut seen: i64,
    then: RequestOp,
) -> Result<Written, OpError> {
    let mut conflicts = 0;
    loop {
        let txn = TxnRequest {
            compare: vec![mod_revision_is(key, seen)],
            success: vec![then.clone()],
            failure: vec![range_op(RangeRequest { key: key.clone(), ..Default::default() })],
        };
        let r = kv.txn(txn).await?.into_inner();
        if r.succeeded {
            return Ok(Written { revision: revision(&r), conflicts });
        }
        conflicts += 1;
        // The key's mod_revision in the Else branch's Get; `None` when the key is gone.
        match range_of(r.responses.first()).and_then(|g| g.kvs.first()).map(|kv| kv.mod_revision) {
            Some(current) if conflicts < MAX_CONFLICTS => seen = current,
            Some(_) => return Err(OpError::new(format!("conflict {MAX_CONFLICTS} times in a row"))),
            None => return Err(OpError::new("the object is gone")),
        }
    }
}

/// One list page: up to `limit` keys of the type under `prefix` from `from`, at `revision`
/// (0 = now, the first page).
pub async fn list_page(
    kv: &mut KvClient<Conn>,
    prefix: &Bytes,
    from: Bytes,
    limit: i64,
    revision: i64,
) -> Result<RangeResponse, OpError> {
    let req = RangeRequest {
        key: from,
        range_end: prefix_end(prefix).into(),
        limit,
        revision,
        ..Default::default()
    };
    Ok(kv.range(req).await?.into_inner())
}

/// A full list of `prefix` as an informer makes it: pages of `page_size` at the first page's
/// revision (the continue token pins it), each under `bound`, recorded in `pages` and handed to
/// `page`. The revision listed at and the first page's count.
pub async fn list(
    kv: &mut KvClient<Conn>,
    prefix: &Bytes,
    (page_size, bound): (i64, Duration),
    pages: Option<&Recorder>,
    mut page: impl FnMut(&RangeResponse) -> Result<(), OpError>,
) -> Result<(i64, i64), OpError> {
    let (mut from, mut pinned, mut count) = (prefix.clone(), 0, 0);
    loop {
        let (sent, got) =
            (Instant::now(), bounded(bound, list_page(kv, prefix, from.clone(), page_size, pinned)).await);
        let p = match pages {
            Some(rec) => rec.record(sent, got),
            None => got,
        }?;
        if pinned == 0 {
            (pinned, count) = (p.header.as_ref().map_or(0, |h| h.revision), p.count);
        }
        page(&p)?;
        match p.kvs.last() {
            // The apiserver's continue key: the key after the last one listed.
            Some(kv) if p.more => from = Bytes::from([&kv.key[..], &[0]].concat()),
            _ => return Ok((pinned, count)),
        }
    }
}

/// Count: the objects under `prefix` now, and the revision counted at.
pub async fn count(kv: &mut KvClient<Conn>, prefix: &Bytes) -> Result<(i64, i64), OpError> {
    let req = RangeRequest {
        key: prefix.clone(),
        range_end: prefix_end(prefix).into(),
        count_only: true,
        ..Default::default()
    };
    let r = kv.range(req).await?.into_inner();
    Ok((r.count, r.header.map_or(0, |h| h.revision)))
}
