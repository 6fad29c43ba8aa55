//! etcd's lease store: the leases as the log applied them. The countdown is not here: it is
//! the lessor's (the actors crate), which the applied lease changes tell what exists.
//!
//! # Layout
//! - [`index`]: which leases exist and which keys each holds.
//! - [`commands`]: lease grants and revokes as the writer applies them.

pub mod commands;
pub mod index;
