//! etcd's backend: where the stores' records live, behind a narrow seam.
//!
//! # Layout
//! - [`engine`]: the narrow storage trait the stores write through.
//! - [`rocks`]: RocksDB behind [`engine`] (feature `rocksdb`, on by default).
//! - [`raft_families`]: the Raft log's own records in the same RocksDB, the one way to them.
//! - [`memory`]: a volatile engine for fuzzing and fast tests.
//! - [`codec`]: the record formats and the format version.
//! - [`recovery`]: what open reads back from the engine, checked.
//! - [`etcd_records`]: the stores' records as etcd's backend buckets, out (snapshots) and in
//!   (`actcd migrate`).
//! - [`member`]: the cluster and member a data dir belongs to.

pub mod codec;
pub mod engine;
#[cfg(feature = "rocksdb")]
pub mod etcd_records;
pub mod member;
pub mod memory;
#[cfg(feature = "rocksdb")]
pub mod raft_families;
pub mod recovery;
#[cfg(feature = "rocksdb")]
pub mod rocks;
