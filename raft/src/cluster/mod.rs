//! The member's place in its Raft cluster.
//!
//! # Layout
//! - [`initial_cluster`]: the initial cluster from etcd's bootstrap flags, and etcd's member and
//!   cluster ids.

pub mod initial_cluster;
