//! The store core, named for etcd's mvcc package: multi-version concurrency control, every key's
//! versions kept by revision, one writer and concurrent readers. It knows proto types but
//! nothing of actors, gRPC or watches: no file here imports actix, tonic or the watch tree, so
//! the replicated log, a fuzz target or a test drives it as plain code.
//!
//! # Layout
//! - [`revision`]: `(main, sub)` revisions and their packed 8-byte form.
//! - [`key_index`]: one key's generations of revisions (etcd's keyIndex), in one allocation.
//! - [`index`]: every key's [`key_index`] entry in key order (etcd's treeIndex).
//! - [`engine`]: the narrow storage trait the core writes through.
//! - [`rocks`]: RocksDB behind [`engine`] (feature `rocksdb`, on by default).
//! - [`memory`]: a volatile engine for fuzzing and fast tests.
//! - [`codec`]: the record formats and the format version.
//! - [`command`]: the write seam: every write as one command.
//! - [`writer`]: the single writer, [`writer::StoreCore`]: apply, commit, compaction, quota.
//! - [`lease_commands`]: lease grants and revokes as the writer applies them.
//! - [`auth_commands`]: the auth commands as the writer applies them.
//! - [`recovery`]: what open reads back from the engine, checked.
//! - [`shared`]: the state the writer shares with its readers, and the visibility rule.
//! - [`read_view`]: the concurrent readers, [`read_view::ReadView`].
//! - [`planned_range`]: a Range read as its encoded kvs, after a pause to reserve memory.
//! - [`range`]: reading at a revision: the index pass, the values, Range's filters.
//! - [`batch`]: one group commit's changes before they are durable.
//! - [`put_delete`]: the puts and deletes every write command makes, each at a sub-revision.
//! - [`txn`]: compares decided up front, nested txns, the taken path.
//! - [`validate`]: the stateless checks etcd makes before a request reaches its store.
//! - [`error`]: the typed errors.
//! - [`lease_index`]: which leases exist and which keys each holds.
//! - [`alarm`]: active alarms and the writes they refuse.
//! - [`member`]: the cluster and member a data dir belongs to.
//! - [`hash`]: hashes of the stored state (etcd's HashKV).

pub mod alarm;
pub mod auth_commands;
pub mod batch;
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
pub mod member;
pub mod memory;
pub mod planned_range;
pub mod put_delete;
pub mod range;
pub mod read_view;
pub mod recovery;
pub mod revision;
#[cfg(feature = "rocksdb")]
pub mod rocks;
pub mod shared;
pub mod txn;
pub mod validate;
pub mod writer;

#[cfg(all(test, feature = "rocksdb"))]
mod model_test;
