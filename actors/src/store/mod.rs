//! The store family: the store core ([`mvcc`]), which knows nothing of actors or of Raft, and
//! the messages its users exchange. The Raft state machine ([`crate::raft`]) is its one writer.
//!
//! # Layout
//! - [`mvcc`]: the store core: revisions, the revision index, the engine, the logic of every
//!   KV request, the writer and the concurrent read view. It imports no actix, tonic or watch.
//! - [`messages`]: the family's messages (writes, committed events, lease queries).
//! - [`auto_compaction`]: etcd's periodic and revision compaction schedules, told the time.
//!
//! The store core's main types are re-exported here, so users of the store need not know
//! which file of the core defines them.

pub mod auto_compaction;
pub mod messages;
pub mod mvcc;

pub use self::mvcc::batch::Batch;
pub use self::mvcc::command::{Command, CommandResponse};
pub use self::mvcc::error::StoreError;
pub use self::mvcc::read_view::{HistoryChunk, ReadView};
#[cfg(feature = "rocksdb")]
pub use self::mvcc::rocks::RocksEngine;
pub use self::mvcc::writer::{CommittedEvents, LeaseChange, StoreConfig, StoreCore};
