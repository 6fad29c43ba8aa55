//! The commands of etcd's benchmark tool that load a server from outside, one module each: its
//! flags (a clap `Args` struct), their checks, and its `run`; `cli` lists the commands. Here the
//! Txn parts several of them build.

pub mod authenticate;
pub mod failover;
pub mod k8s;
pub mod lease_keepalive;
pub mod put;
pub mod range;
pub mod stm;
pub mod txn_mixed;
pub mod txn_put;
pub mod watch;
pub mod watch_fanout;
pub mod watch_get;
pub mod watch_latency;

use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::response_op::Response;
use actcd_proto::etcdserverpb::{Compare, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp};
use bytes::Bytes;

pub fn put_op(key: Bytes, value: Bytes) -> RequestOp {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key, value, ..Default::default() })) }
}

pub fn range_op(range: RangeRequest) -> RequestOp {
    RequestOp { request: Some(Request::RequestRange(range)) }
}

pub fn range_of(op: Option<&ResponseOp>) -> Option<&RangeResponse> {
    match op?.response.as_ref()? {
        Response::ResponseRange(r) => Some(r),
        _ => None,
    }
}

/// A compare of `key`'s version, create or mod revision, value or lease (as `value` names it).
pub fn compare(key: &Bytes, result: CompareResult, value: TargetUnion) -> Compare {
    let target = match value {
        TargetUnion::Version(_) => CompareTarget::Version,
        TargetUnion::CreateRevision(_) => CompareTarget::Create,
        TargetUnion::ModRevision(_) => CompareTarget::Mod,
        TargetUnion::Value(_) => CompareTarget::Value,
        TargetUnion::Lease(_) => CompareTarget::Lease,
    };
    Compare {
        key: key.clone(),
        result: result as i32,
        target: target as i32,
        target_union: Some(value),
        range_end: Bytes::new(),
    }
}
