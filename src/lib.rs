//! actcd: a key-value server that speaks the etcd v3 gRPC API.
//!
//! # Layout
//! - [`api`]: the gRPC services and methods served, by name.
//! - [`config`]: command-line flags with etcd's names; [`arbiters`]: the threads stream actors share.
//! - [`server`]: process wiring: store, StoreActor, gRPC listeners, shutdown.
//! - [`kv`]: the KV service (reads on the read view, writes through the StoreActor).
//! - [`lease`]: the Lease service (grants and revokes through the StoreActor, deadlines in the
//!   LeaseActor).
//! - [`watch`]: the Watch service (one StreamActor per stream).
//! - [`maintenance`]: the Maintenance and Cluster services (status, alarms, hashes, defragment,
//!   snapshots, members); [`snapshot`]: `actcd snapshot restore`; [`auth`]: the Auth service
//!   while authentication is disabled.
//! - [`health`]: grpc.health.v1; [`http`]: /metrics, /health and /version on the metrics URLs.
//! - [`metrics`]: the Prometheus recorder and sampled series.
//! - [`status`]: store errors as gRPC statuses.
//! - [`transport`]: between a socket and the services: the descriptor budget, connection ids and
//!   ends, Range backpressure, the gRPC metrics layer and grpc-go's error texts.
#![deny(missing_docs)]

pub mod api;
pub mod arbiters;
pub mod auth;
pub mod config;
pub mod health;
pub mod http;
pub mod kv;
pub mod lease;
pub mod maintenance;
pub mod metrics;
pub mod server;
pub mod snapshot;
pub mod status;
pub mod transport;
pub mod watch;
