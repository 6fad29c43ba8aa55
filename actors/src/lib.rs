//! actcd's actors and the store core they share. One folder per actor family: the family's
//! plain structs, the actix shells beside them, and its messages in its `messages` module.
//!
//! # Layout
//! - [`auth`]: the auth family: users, roles, permissions, the checks, simple tokens.
//! - [`store`]: the store family: the store core ([`store::mvcc`], no actors) and its messages.
//! - [`watch`]: the watch family: WatchRoot, WatchShards, the watch records, the StreamActor.
//! - [`lease`]: the lease family: the lessor, the LeaseActor, the keep-alive stream actor.
//! - [`conn`]: the conn family: the ConnActor of one client connection.
//! - [`identity`]: the member identity stamped on response headers.
//! - [`raft`]: the Raft family: the log, the state machine and the snapshots openraft drives.
//! - [`mailboxes`]: the capacity of each long-lived actor's mailbox, and what a full one does.
//! - [`failpoints`]: test-build failpoints at a write's boundaries through the log.
//! - [`metric_names`]: every metric name exported, and the actor kinds that label them.
//!
//! Imports run one way, never in a circle: conn → watch → store and lease → store, the store
//! publishing to the watch tree through a `Recipient` of its own message; nothing under
//! `store::mvcc` imports actix, tonic or the watch tree.
#![deny(missing_docs)]

pub mod auth;
pub mod conn;
pub mod failpoints;
pub mod identity;
pub mod lease;
pub mod mailboxes;
pub mod metric_names;
#[cfg(feature = "rocksdb")]
pub mod raft;
pub mod store;
pub mod watch;
