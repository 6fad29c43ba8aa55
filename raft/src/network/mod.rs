//! The peer transport: gRPC between the members of a cluster (the `actcdpeerpb.Peer` service),
//! carrying openraft's messages, the calls a follower forwards to its leader, and snapshots.
//! A message's body is postcard bytes of openraft's own types, in a frame that names the
//! sender's cluster and id.
//!
//! # Layout
//! - [`peers`]: the client half (replication, and what followers forward).
//! - [`peer_service`]: the server half, on `--listen-peer-urls`.
//! - [`snapshot_stream`]: a checkpoint's files streamed to a member that fell behind.
//! - [`tls_connector`]: the dialer of https peer URLs, with the TLS configuration the edge built.

pub mod peer_service;
pub mod peers;
pub mod snapshot_stream;
pub mod tls_connector;
