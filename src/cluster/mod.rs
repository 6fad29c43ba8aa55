//! The member's place in its Raft cluster: openraft started over the store's log and state
//! machine, with etcd's timing flags.
//!
//! # Layout
//! - [`start`]: openraft's configuration from the flags, the Raft started, a new cluster
//!   initialised, and the wait for its first leader.
//! - [`single_member`]: the network of a one-member cluster, which has no peer to reach.

pub mod single_member;
pub mod start;
