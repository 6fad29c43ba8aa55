//! actcd's Raft: every write goes through one Raft log (openraft 0.9, its storage-v2 API),
//! and the committed entries are applied by the store core on every member. A single node is a
//! one-member cluster on the same path.
//!
//! # Layout
//! - [`types`]: what the log carries (a [`types::Proposal`] per batch of writes) and openraft's
//!   type configuration.
//! - [`failpoints`]: test-build failpoints at a write's boundaries through the log.
//! - [`fail_stop`]: a failed write to the log or the state machine ends the process, as etcd's does.
//! - [`wal`]: the log's entries in segment files zero-filled ahead, as etcd's WAL keeps them.
//! - [`log_store`]: openraft's log over the [`wal`], its vote and marks in the store's
//!   RocksDB; its append is the one fsync a write pays for.
//! - [`log_durability`]: how far the log is durable; the leader's fsync runs behind its
//!   append, beside the followers' (as etcd's leader does), and gates the apply.
//! - [`state_machine`]: committed entries applied by the [`actcd_store::StoreCore`], the
//!   applied log id written with their changes.
//! - [`applied_sync`]: RocksDB's WAL synced behind the state machine every 100 ms, so that a
//!   power loss replays at most that much of the log.
//! - [`proposer`]: where writes enter the log, batched one entry per batch.
//! - [`route`]: to this member's Raft when it leads, to the leader when another member does.
//! - [`read_barrier`]: linearizable reads, one read-index round for all that queued.
//! - [`reconfig`]: etcd's rules for a membership change, checked before it is proposed.
//! - [`removed`]: the ids removed from the cluster, and this member learning it is one.
//! - [`position`]: the applied log id and membership, written with the data they reflect.
//! - [`snapshot_store`]: checkpoints of the state machine, built, kept and installed.
//! - [`network`]: the peer transport between members, both halves, and snapshots streamed.
//! - [`cluster`]: a member's Raft started with etcd's flags and ids, its membership changes, and
//!   the watchdogs beside it (CheckQuorum, peer probes, corruption checks, auto-compaction).
//! - `cluster_harness` (tests): N members of the above on an in-memory network that cuts any off.
//!
//! Nothing here decides a write's outcome: every rule stays in the store core's apply, which
//! sees the same commands in the same order on every member.

// openraft's StorageError (224 bytes) is what its storage traits return; the helpers here
// return it too rather than box it only for the trait methods to unbox it again.
#![allow(clippy::result_large_err)]

pub mod applied_sync;
pub mod cluster;
pub mod fail_stop;
pub mod failpoints;
pub mod log_durability;
pub mod log_store;
pub mod network;
pub mod position;
pub mod proposer;
pub mod read_barrier;
pub mod reconfig;
pub mod removed;
pub mod route;
pub mod snapshot_store;
pub mod state_machine;
pub mod types;
pub mod wal;

#[cfg(test)]
mod cluster_harness;
#[cfg(test)]
mod storage_suite;
