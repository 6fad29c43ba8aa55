//! actcd: a key-value server that speaks the etcd v3 gRPC API.
//!
//! The modules are layers, and imports only point down the list below: `server` wires all of
//! them; `http` reads the store through `grpc`'s handle (and the version Maintenance
//! reports) and takes its sockets from `transport`'s budget; the `grpc` services read what
//! `transport` leaves in each request; both name the served methods from the list the protos
//! generate (`actcd_proto::services`). `config` takes its value types from `transport` (the
//! initial cluster's from `actcd_raft`) and the version it prints from `grpc`. `snapshot`
//! restores through `migrate`; `migrate` reads, and `grpc`'s Snapshot writes, through
//! `etcd_file`, which imports no other module.
//!
//! # Layout
//! - [`config`]: etcd's flags, ETCD_* variables and YAML config file.
//! - [`c_heap`]: glibc's heap (RocksDB's): large blocks mmapped, free memory given back when idle.
//! - [`server`]: process wiring: store, Raft (`actcd_raft`'s cluster and peer transport),
//!   Proposer, watch tree, listeners, shutdown.
//! - [`http`]: HTTP on the client and metrics URLs: /livez, /readyz, /health, /version, /metrics.
//! - [`metrics`]: the Prometheus recorder and the series sampled at scrape time.
//! - [`grpc`]: the etcd gRPC services and the one mapping of store errors to gRPC statuses.
//! - [`transport`]: between a socket and the services: the descriptor budget, connection ids and
//!   ends, Range backpressure, the gRPC metrics layer and grpc-go's error texts.
//! - [`snapshot`]: `actcd snapshot restore`, run instead of the server.
//! - [`migrate`]: `actcd migrate --from-etcd`: an etcd backend into a data dir, history and all.
//! - [`etcd_file`]: etcd's backend file (bbolt), read and written.
//! - [`systemd`]: READY=1 and STOPPING=1 for a `Type=notify` unit.
#![deny(missing_docs)]

pub mod c_heap;
pub mod config;
pub mod etcd_file;
pub mod grpc;
pub mod http;
pub mod metrics;
pub mod migrate;
pub mod server;
pub mod snapshot;
pub mod systemd;
pub mod transport;
