//! actcd's actors and the store core they share.
//!
//! # Layout
//! - [`store`]: the store core (no actors): revision index, RocksDB engine, KV logic, the
//!   single writer and the concurrent read view; and the StoreActor, which turns queued writes
//!   into group commits and publishes committed events.
//! - [`watch`]: the watch tree: WatchRoot, WatchShards and the watch records they hold, and the
//!   StreamActor of one Watch gRPC stream.
//! - [`conn`]: the ConnActor of one client connection.
//! - [`lease`]: the LeaseActor (deadlines, keep-alives, expiry) and the actor of one
//!   LeaseKeepAlive stream.
//! - [`identity`]: the member identity stamped on response headers.
//! - [`failpoints`]: test-build failpoints at the group commit's boundaries.
#![deny(missing_docs)]

pub mod conn;
pub mod failpoints;
pub mod identity;
pub mod lease;
pub mod store;
pub mod watch;
