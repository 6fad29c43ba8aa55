//! etcd's Lock and Election services (v3lockpb, v3electionpb). etcd builds them as clients of
//! its own KV, Watch and Lease API (its concurrency package, through an in-process client), and
//! so does this: the keys, revisions and transactions are exactly those of clientv3's Mutex and
//! Election, so a lock taken with `etcdctl lock` (clientv3 over KV, Watch and Lease) and one
//! taken through the Lock service on the same name exclude each other.
//!
//! ```text
//!   name/                    the lock's or election's prefix
//!   name/<lease in hex>      one holder or campaigner, value "" (lock) or its proclamation,
//!                            attached to its lease; the oldest (lowest create revision) holds
//!                            the lock or leads. A waiter watches for the delete of the newest
//!                            key older than its own, until none is left.
//! ```
//!
//! # Layout
//! - [`local`]: the in-process client: each call with the rights of the caller it serves.
//! - [`waits`]: waiting for every older key under a prefix to go (etcd's waitDeletes).
//! - [`lock`]: the Lock service (clientv3's Mutex).
//! - [`election`]: the Election service (clientv3's Election), Observe's stream among it.

pub mod election;
pub mod local;
pub mod lock;
pub mod waits;

use actcd_proto::etcdserverpb::{RangeRequest, ResponseHeader};
use actcd_proto::key_range::prefix_end;

/// Sessions given no lease get one with this TTL, as clientv3's concurrency sessions do.
pub const SESSION_TTL: i64 = 60;

/// `name/`, the prefix of a lock's or election's keys.
pub fn prefix(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// `name/<lease in hex>`, the key of one holder or campaigner.
pub fn own_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// clientv3's `WithFirstCreate`: the oldest key under `prefix`.
pub fn first_created(prefix: &[u8]) -> RangeRequest {
    use actcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
    RangeRequest {
        key: prefix.to_vec().into(),
        range_end: prefix_end(prefix).into(),
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        limit: 1,
        ..Default::default()
    }
}

/// A header the inner calls always carry; a missing one is an empty header rather than a panic.
fn header(header: Option<ResponseHeader>) -> ResponseHeader {
    header.unwrap_or_default()
}
