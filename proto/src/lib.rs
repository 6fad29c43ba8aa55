//! The etcd v3 wire contract, generated from the `.proto` files in `etcd/`.
//!
//! # Layout
//! - [`etcdserverpb`]: the KV, Watch, Lease, Cluster, Maintenance and Auth services and their messages.
//! - [`mvccpb`]: `KeyValue` and `Event`, the stored and watched records.
//! - [`authpb`]: users, roles and permissions.
//! - [`v3lockpb`], [`v3electionpb`]: etcd's Lock and Election services, built on leases,
//!   revisions and Txn.
//! - [`health`]: the standard `grpc.health.v1` service, which etcd registers too.
//! - [`actcdpeerpb`]: actcd's peer transport between members of one cluster (not etcd's).
//! - [`codec`]: the protobuf codec of every RPC (prost's, with small initial buffers).
//! - [`errors`]: etcd's error texts and the gRPC code of each.
//! - [`key_range`]: etcd's rule for a request's `key` and `range_end`, and prefix ends.
//! - [`go_duration`]: Go's duration text (`1m30s`), as etcd's flags and reports write it.
//! - [`services`]: every service and method the protos define (generated, not hand-kept).
//! - [`watch_reply`]: the server's WatchResponse, whose events are encoded once and shared by
//!   every watcher they go to.
//!
//! Field names and numbers are etcd's, so any etcd client talks to a server built on these types.
#![allow(missing_docs, clippy::unwrap_used, clippy::doc_lazy_continuation, clippy::large_enum_variant)]

pub mod codec;
pub mod errors;
pub mod go_duration;
pub mod key_range;
pub mod services;
pub mod watch_reply;

/// etcd's packages: each row's module holds the package's generated messages and services, and
/// their serde (JSON) impls for the gateway.
macro_rules! etcd_packages {
    ($($(#[$doc:meta])* pub mod $package:ident {})*) => {$(
        $(#[$doc])*
        pub mod $package {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($package), ".rs"));
            include!(concat!(env!("OUT_DIR"), "/", stringify!($package), ".serde.rs"));
        }
    )*};
}

etcd_packages! {
    /// etcd's `mvccpb` package.
    pub mod mvccpb {}
    /// etcd's `authpb` package.
    pub mod authpb {}
    /// etcd's `etcdserverpb` package.
    pub mod etcdserverpb {}
    /// etcd's `v3lockpb` package.
    pub mod v3lockpb {}
    /// etcd's `v3electionpb` package.
    pub mod v3electionpb {}
}

/// actcd's peer service (`actcd/peer.proto`).
pub mod actcdpeerpb {
    tonic::include_proto!("actcdpeerpb");
}

/// The `grpc.health.v1` package.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
