//! actcd's edge logic that needs neither RocksDB nor a running server: how a member is
//! configured, the TLS its flags describe, etcd's backend file format, and how answers are
//! mapped to what etcd's clients expect (gRPC statuses, grpc-go's texts, grpc-gateway's JSON).
//! The `actcd` package serves with it; here its unit tests run in a test binary that links no
//! RocksDB, so they take seconds.
//!
//! Imports point down the list below: `config` takes its value types from `tls` and `cors`,
//! and the version it prints from here; no other module imports another.
//!
//! # Layout
//! - [`config`]: etcd's flags, ETCD_* variables and YAML config file, parsed and checked.
//! - [`tls`]: TLS for the client and peer URLs from etcd's flags, both ends, and the name
//!   checks on a peer's certificate.
//! - [`cors`]: `--cors`'s origins, and the middleware that answers with them.
//! - [`gateway`]: the JSON gateway's mapping: a request's JSON to its message, an answer's or a
//!   status's JSON back, the streams of many objects.
//! - [`status`]: store errors as gRPC statuses, with etcd's codes and texts, and actcd's own.
//! - [`grpc_go_errors`]: the codes and texts etcd's grpc-go answers malformed traffic with.
//! - [`authority_fix`]: the scheme etcdctl 3.4 puts into the HTTP/2 `:authority`, taken out
//!   before h2 refuses the stream.
//! - [`bbolt`]: etcd's backend file format (bbolt), read and written.
#![deny(missing_docs)]

pub mod authority_fix;
pub mod bbolt;
pub mod config;
pub mod cors;
pub mod gateway;
pub mod grpc_go_errors;
pub mod status;
pub mod tls;

/// The version actcd reports (Maintenance.Status, /version, `--version`, the server_version
/// series): clients gate features (such as progress requests) on a 3.6-series server.
pub const SERVER_VERSION: &str = "3.6.0";
