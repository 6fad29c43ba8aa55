//! actcd's actors and the store core they share.
//!
//! # Layout
//! - [`store`]: the store core (no actors): revision index, RocksDB engine, KV logic, the
//!   single writer and the concurrent read view.
//! - [`store_actor`]: the StoreActor, which turns queued writes into group commits.
#![deny(missing_docs)]

pub mod store;
pub mod store_actor;
