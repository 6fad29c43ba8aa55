//! Dev-only helpers shared by actcd's tests, benches and fuzz targets. It depends on no other
//! crate of the workspace but the wire contract, so nothing here links RocksDB.
//!
//! # Layout
//! - [`etcd_model`]: a sequential model of etcd's store, for checking what a server answers.
//! - [`history`]: a recorded history of KV calls (who asked what, when, and what came back).
//! - [`history_check`]: the linearizability checker of a [`history`] against the [`etcd_model`].
//! - [`history_workload`]: the calls a linearizability client makes, over a dozen keys.
//! - [`kv_only`]: an in-process server of KV puts and ranges only.
//! - [`procfs`]: a process's memory, CPU time, files and sockets, and the machine, from `/proc`.
//! - [`server`]: actcd or etcd started on free loopback ports, stopped by its pid.
//! - [`module_graph`]: which modules of a crate use which, and the import circles among them.
#![deny(missing_docs)]

pub mod etcd_model;
pub mod history;
pub mod history_check;
pub mod history_workload;
pub mod kv_only;
pub mod module_graph;
pub mod procfs;
pub mod server;
