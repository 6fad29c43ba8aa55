//! The store core: revisions, the key index, the storage engine and the logic of every KV
//! request. It knows proto types but nothing of actors, gRPC or watches.
//!
//! # Layout
//! - [`revision`]: `(main, sub)` revisions and their packed 8-byte form.
//! - [`key_index`] / [`index`]: the in-memory revision index (etcd's keyIndex / treeIndex).
//! - [`engine`]: the narrow storage trait; [`rocks`]: RocksDB behind it (feature `rocksdb`, on by
//!   default); [`memory`]: a volatile engine for fuzzing; [`codec`]: record formats.
//! - [`lease_index`]: which leases exist and which keys each holds.
//! - [`command`]: the write seam; [`core`]: the single writer and the concurrent read view.
//! - [`range`] / [`txn`]: reading at a revision, compares, and the writes inside a transaction.
//! - [`validate`]: the stateless checks etcd makes before a request reaches its store.
//! - [`error`]: the typed errors.
//! - [`alarm`]: active alarms and the writes they refuse; [`hash`]: hashes of the stored state;
//!   [`snapshot`]: checkpoint snapshots and their restore.

pub mod alarm;
pub mod codec;
pub mod command;
pub mod core;
pub mod engine;
pub mod error;
#[cfg(feature = "rocksdb")]
pub mod hash;
pub mod index;
pub mod key_index;
pub mod lease_index;
pub mod memory;
pub mod range;
pub mod revision;
#[cfg(feature = "rocksdb")]
pub mod rocks;
#[cfg(feature = "rocksdb")]
pub mod snapshot;
pub mod txn;
pub mod validate;

pub use self::command::{Command, CommandResponse};
pub use self::core::{CommittedEvents, HistoryChunk, ReadView, StoreConfig, StoreCore};
pub use self::error::StoreError;
#[cfg(feature = "rocksdb")]
pub use self::rocks::RocksEngine;
pub use self::txn::Batch;

#[cfg(all(test, feature = "rocksdb"))]
mod model_test;
