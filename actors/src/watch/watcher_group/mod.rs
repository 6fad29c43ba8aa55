//! A shard's watches and everything done to them: matching committed events, catching up
//! watchers that fell behind, progress notifications. A plain struct, [`WatcherGroup`], whose
//! methods take the store ([`History`]) and the streams ([`Outbox`]) as parameters: tests drive
//! it with a store and fake buffers, no actor runtime; [`super::shard`] is its actix shell.
//!
//! # Layout
//! - [`group`]: the watches, the synced / unsynced sets and the moves between them (drawn).
//! - [`live`]: committed batches matched against the synced set and delivered; gaps and stalls.
//! - [`catch_up`]: unsynced watchers served from storage; compacted ones canceled.
//! - [`encoded`]: an event encoded once for all the watchers it goes to.
//! - [`progress`]: progress requests and the periodic progress tick.
//! - [`outbox`]: where the group's responses go, and what came of a delivery.
//! - [`history`]: the store as the group reads it.

pub mod catch_up;
mod encoded;
pub mod group;
pub mod history;
pub mod live;
pub mod outbox;
pub mod progress;
#[cfg(test)]
mod test_support;

pub use self::catch_up::SyncLimits;
pub use self::group::WatcherGroup;
pub use self::history::History;
pub use self::outbox::{Delivery, Outbox};
