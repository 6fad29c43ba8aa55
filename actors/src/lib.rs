//! actcd's actors: the watch tree, the streams, the connections and the leases. One folder per
//! actor family: the family's plain structs, the actix shells beside them, and its messages in
//! its `messages` module. The stores they read are the store crate's; Raft is above them.
//!
//! # Layout
//! - [`watch`]: the watch family: WatchShards, the watch records, the StreamActor.
//! - [`lease`]: the lease family: the lessor, the LeaseActor, the keep-alive stream actor.
//! - [`conn`]: the conn family: the ConnActor of one client connection.
//! - [`identity`]: the member identity stamped on response headers.
//! - [`mailboxes`]: the capacity of each long-lived actor's mailbox, and what a full one does.
//!
//! Imports run one way, never in a circle: conn → watch → the store crate's read view and
//! lease → the store crate; the state machine (the Raft crate) publishes to the watch tree
//! through a `Recipient` of the tree's own message.
#![deny(missing_docs)]

pub mod conn;
pub mod identity;
pub mod lease;
pub mod mailboxes;
pub mod watch;
