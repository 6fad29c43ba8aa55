//! The store core, named for etcd's mvcc package: multi-version concurrency control, every key's
//! versions kept by revision, one writer and concurrent readers. It knows proto types but
//! nothing of actors, gRPC or watches: no file here imports actix, tonic or the watch tree, so
//! the replicated log, a fuzz target or a test drives it as plain code.
//!
//! # Layout
//! - [`revision`]: `(main, sub)` revisions and their packed 8-byte form.
//! - [`key_index`] / [`index`]: the in-memory revision index (etcd's keyIndex / treeIndex).
//! - [`engine`]: the narrow storage trait; [`rocks`]: RocksDB behind it (feature `rocksdb`, on by
//!   default); [`memory`]: a volatile engine for fuzzing and tests; [`codec`]: record formats.
//! - [`lease_index`]: which leases exist and which keys each holds.
//! - [`command`]: the write seam; [`writer`]: the single writer ([`writer::StoreCore`]), which
//!   applies commands and commits them; [`lease_commands`]: the lease grants and revokes it
//!   applies; [`recovery`]: what it reads back at open.
//! - [`read_view`]: the concurrent readers; [`shared`]: the state they share with the writer,
//!   and why a read never sees a batch before its fsync.
//! - [`range`] / [`txn`]: reading at a revision, compares, and the writes inside a transaction.
//! - [`validate`]: the stateless checks etcd makes before a request reaches its store.
//! - [`error`]: the typed errors.
//! - [`alarm`]: active alarms and the writes they refuse; [`hash`]: hashes of the stored state;
//!   [`snapshot`]: checkpoint snapshots and their restore.

pub mod alarm;
pub mod codec;
pub mod command;
pub mod engine;
pub mod error;
#[cfg(feature = "rocksdb")]
pub mod hash;
pub mod index;
pub mod key_index;
pub mod lease_commands;
pub mod lease_index;
pub mod memory;
pub mod range;
pub mod read_view;
pub mod recovery;
pub mod revision;
#[cfg(feature = "rocksdb")]
pub mod rocks;
pub mod shared;
#[cfg(feature = "rocksdb")]
pub mod snapshot;
pub mod txn;
pub mod validate;
pub mod writer;

#[cfg(all(test, feature = "rocksdb"))]
mod model_test;
