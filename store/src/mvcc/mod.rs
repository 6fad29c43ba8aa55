//! etcd's mvcc: multi-version concurrency control, every key's versions kept by revision, one
//! writer and concurrent readers.
//!
//! # Layout
//! - [`revision`]: `(main, sub)` revisions and their packed 8-byte form.
//! - [`key_index`]: one key's generations of revisions (etcd's keyIndex), in one allocation.
//! - [`index`]: every key's [`key_index`] entry in key order (etcd's treeIndex).
//! - [`batch`]: one group commit's changes before they are durable.
//! - [`put_delete`]: the puts and deletes every write command makes, each at a sub-revision.
//! - [`txn`]: compares decided up front, nested txns, the taken path.
//! - [`range`]: reading at a revision: the index pass, the values, Range's filters.
//! - [`planned_range`]: a Range read as its encoded kvs, after a pause to reserve memory.
//! - [`shared`]: the state the writer shares with its readers, and the visibility rule.
//! - [`read_view`]: the concurrent readers, [`read_view::ReadView`].
//! - [`hash`]: hashes of the stored state (etcd's HashKV).

pub mod batch;
#[cfg(feature = "rocksdb")]
pub mod hash;
pub mod index;
pub mod key_index;
pub mod planned_range;
pub mod put_delete;
pub mod range;
pub mod read_view;
pub mod revision;
pub mod shared;
pub mod txn;

#[cfg(all(test, feature = "rocksdb"))]
mod model_test;
