//! actcd: a key-value server that speaks the etcd v3 gRPC API.
//!
//! # Layout
//! - [`config`]: command-line flags with etcd's names.
//! - [`server`]: process wiring: store, StoreActor, watch tree, gRPC listeners, shutdown.
//! - [`grpc`]: the etcd gRPC services and the one mapping of store errors to gRPC statuses.
//! - [`transport`]: between a socket and the services: the descriptor budget, connection ids and
//!   ends, Range backpressure, the gRPC metrics layer and grpc-go's error texts.
//! - [`api`]: the gRPC services and methods served, by name.
//! - [`http`]: /metrics, /health and /version on the metrics URLs.
//! - [`metrics`]: the Prometheus recorder and sampled series.
//! - [`snapshot`]: `actcd snapshot restore`.
#![deny(missing_docs)]

pub mod api;
pub mod config;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod server;
pub mod snapshot;
pub mod transport;
