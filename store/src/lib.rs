//! actcd's state machine state: every store a member keeps, one folder a store as etcd's
//! server/ has them, and the single writer that applies the log's commands to them. It knows
//! proto types but nothing of actors, gRPC or Raft: the Raft crate drives it as plain code, and
//! so do a fuzz target and a test.
//!
//! # Layout
//! - [`mvcc`]: etcd's storage/mvcc: revisions, the revision index, reads at a revision, the
//!   puts, deletes and txns every write makes, the read view readers share.
//! - [`apply`]: etcd's etcdserver/apply: the write seam ([`apply::command`]), the writer that
//!   applies each command through its rules, validation, quota and alarms.
//! - [`auth_store`]: etcd's auth store: users, roles, permissions, the checks, simple tokens.
//! - [`lease_store`]: etcd's lease store: which leases exist and which keys each holds.
//! - [`backend`]: etcd's backend: the engine seam, RocksDB behind it, a volatile engine, the
//!   record formats, what open reads back, the data dir's member identity.
//! - [`auto_compaction`]: etcd's periodic and revision compaction schedules, told the time.
//! - [`error`]: the typed errors a write or a read ends in.
//! - [`metric_names`]: every metric name exported, and the actor kinds that label them (the
//!   one owner, at the bottom of the crate graph so every crate can name them).
//!
//! The writer's and the readers' main types are re-exported here, so users of the store need
//! not know which file defines them.
#![deny(missing_docs)]

pub mod apply;
pub mod auth_store;
pub mod auto_compaction;
pub mod backend;
pub mod error;
pub mod lease_store;
pub mod metric_names;
pub mod mvcc;

pub use self::apply::command::{Command, CommandResponse};
pub use self::apply::writer::{CommittedEvents, LeaseChange, StoreConfig, StoreCore};
#[cfg(feature = "rocksdb")]
pub use self::backend::rocks::RocksEngine;
pub use self::error::StoreError;
pub use self::mvcc::batch::Batch;
pub use self::mvcc::read_view::{HistoryChunk, ReadView};
