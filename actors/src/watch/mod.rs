//! The watch actor tree.
//!
//! ```text
//!  state machine ──Committed (Arc, one per applied batch, the same Arc to every shard)
//!                                                          │
//!                                                          ▼
//!                                            WatchShard 0 … WatchShard K-1
//!                     each holds the watches of the streams assigned to it (stream id mod K)
//!                                                          │ one message per stream per batch
//!                                                          ▼
//!                                                    StreamActor ──▶ gRPC response stream
//! ```
//!
//! A watch is a small record in its shard's [`watcher_group::WatcherGroup`], not an actor.
//! Every hop is bounded and lossy in the same recoverable way: a full mailbox drops the
//! message, and the receiver (or the watchers that missed it) catches up from storage by
//! revision. So a slow client or shard never blocks the store, and memory never grows
//! with how far behind anyone is.
//!
//! # Layout
//! - [`messages`]: the messages of the tree (state machine → shard → stream and back).
//! - [`watcher`]: one watch's record and what it matches.
//! - [`slab`]: a shard's records in fixed chunks, addressed by slot number.
//! - [`interval_tree`]: the ranges of range watches, for "which contain this key?" (a treap).
//! - [`range_index`]: exact keys in a hash table, ranges in an [`interval_tree`].
//! - [`watcher_group`]: a shard's watches: synced / unsynced sets, matching, catch-up, progress.
//! - [`shard`]: the WatchShard, the actix shell around a watcher group.
//! - [`stream_state`]: one Watch stream's watch ids, requests and outgoing responses.
//! - [`watch_ids`]: a stream's live watch ids, a bit each for the ids the server picked.
//! - [`stream`]: the StreamActor, the actix shell around a stream's state.

pub mod interval_tree;
pub mod messages;
pub mod range_index;
pub mod shard;
pub mod slab;
pub mod stream;
pub mod stream_state;
pub mod watch_ids;
pub mod watcher;
pub mod watcher_group;
