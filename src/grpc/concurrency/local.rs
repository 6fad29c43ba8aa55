//! The in-process client the Lock and Election services call the KV, Watch and Lease services
//! through, as etcd's v3client does: every call carries the metadata (auth token, require-
//! leader) and the connection facts (a client certificate's name) of the request it serves, so
//! the caller's permissions apply to each key the lock or election touches.

use std::sync::Arc;

use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::lease_server::Lease;
use actcd_proto::etcdserverpb::{
    compare, request_op, watch_request, Compare, DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest,
    PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, TxnResponse, WatchCreateRequest,
    WatchRequest, WatchResponse,
};
use futures::StreamExt;
use tonic::codegen::BoxStream;
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Request, Status};

use crate::grpc::kv::KvService;
use crate::grpc::lease::LeaseService;
use crate::grpc::watch::WatchService;

/// The services the in-process client calls.
#[derive(Clone)]
pub struct Backends {
    /// KV: the lock's transactions and reads.
    pub kv: Arc<KvService>,
    /// Watch: waiting for deletes, Observe.
    pub watch: Arc<WatchService>,
    /// Lease: a session's lease when the caller names none.
    pub lease: Arc<LeaseService>,
}

/// A client with the rights of one caller.
#[derive(Clone)]
pub struct Local {
    backends: Backends,
    metadata: MetadataMap,
    extensions: Extensions,
}

impl Local {
    /// A client acting for the caller of `request`.
    pub fn of<T>(backends: &Backends, request: &Request<T>) -> Self {
        Self {
            backends: backends.clone(),
            metadata: request.metadata().clone(),
            extensions: request.extensions().clone(),
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        Request::from_parts(self.metadata.clone(), self.extensions.clone(), message)
    }

    /// KV.Txn.
    pub async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse, Status> {
        Ok(self.backends.kv.txn(self.request(txn)).await.map_err(as_client_error)?.into_inner())
    }

    /// KV.Range (linearizable, as clientv3's Get).
    pub async fn range(&self, range: RangeRequest) -> Result<RangeResponse, Status> {
        Ok(self.backends.kv.range_message(self.request(range)).await.map_err(as_client_error)?.into_inner())
    }

    /// KV.DeleteRange of one key.
    pub async fn delete(&self, key: &[u8]) -> Result<DeleteRangeResponse, Status> {
        let delete = DeleteRangeRequest { key: key.to_vec().into(), ..Default::default() };
        Ok(self.backends.kv.delete_range(self.request(delete)).await.map_err(as_client_error)?.into_inner())
    }

    /// LeaseGrant of a new lease with `ttl` seconds: its id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, Status> {
        let grant = LeaseGrantRequest { ttl, id: 0 };
        Ok(self
            .backends
            .lease
            .lease_grant(self.request(grant))
            .await
            .map_err(as_client_error)?
            .into_inner()
            .id)
    }

    /// A watch stream with `create` as its one request.
    pub fn watch(&self, create: WatchCreateRequest) -> Result<BoxStream<WatchResponse>, Status> {
        let create = WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) };
        let stream =
            self.backends.watch.open(futures::stream::iter([create]), &self.metadata, &self.extensions);
        Ok(Box::pin(stream.map_err(as_client_error)?.map(|r| r.map_err(as_client_error))))
    }
}

/// An inner call's error as the Lock and Election services answer it: etcd's go through
/// clientv3, which turns a status into an error value that keeps the text but not the code,
/// so the caller gets codes.Unknown with etcd's text.
fn as_client_error(status: Status) -> Status {
    Status::unknown(status.message())
}

/// `create_revision(key) == revision` (0: the key does not exist).
pub fn created_at(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.to_vec().into(),
        target_union: Some(compare::TargetUnion::CreateRevision(revision)),
        ..Default::default()
    }
}

/// A Put of `key` = `value` attached to `lease`, as a txn operation.
pub fn put_op(key: &[u8], value: &[u8], lease: i64) -> RequestOp {
    let put =
        PutRequest { key: key.to_vec().into(), value: value.to_vec().into(), lease, ..Default::default() };
    RequestOp { request: Some(request_op::Request::RequestPut(put)) }
}

/// A Range as a txn operation.
pub fn range_op(range: RangeRequest) -> RequestOp {
    RequestOp { request: Some(request_op::Request::RequestRange(range)) }
}

/// A point Range of `key`, as a txn operation.
pub fn get_op(key: &[u8]) -> RequestOp {
    range_op(RangeRequest { key: key.to_vec().into(), ..Default::default() })
}

/// A Delete of `key`, as a txn operation.
pub fn delete_op(key: &[u8]) -> RequestOp {
    let delete = DeleteRangeRequest { key: key.to_vec().into(), ..Default::default() };
    RequestOp { request: Some(request_op::Request::RequestDeleteRange(delete)) }
}

/// The Range answer at `index` of a txn's responses (none if it is not a Range).
pub fn range_at(txn: &TxnResponse, index: usize) -> Option<&RangeResponse> {
    use actcd_proto::etcdserverpb::response_op::Response;
    match txn.responses.get(index)?.response.as_ref()? {
        Response::ResponseRange(range) => Some(range),
        _ => None,
    }
}
