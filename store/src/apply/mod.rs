//! etcd's apply: the one way state changes. Every write is a [`command::Command`], applied by
//! the single writer through its rules on every member in log order.
//!
//! # Layout
//! - [`command`]: the write seam: every write as one command, its log tag and typed response.
//! - [`writer`]: the single writer, [`writer::StoreCore`]: apply, compaction, quota.
//! - [`validate`]: the stateless checks etcd makes before a request reaches its store.
//! - [`alarm`]: active alarms and the writes they refuse.

pub mod alarm;
pub mod command;
pub mod validate;
pub mod writer;
