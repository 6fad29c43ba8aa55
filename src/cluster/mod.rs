//! The member's place in its Raft cluster: openraft started over the store's log and state
//! machine, with etcd's timing flags, and the peer transport between members.
//!
//! # Layout
//! - [`start`]: openraft's configuration from the flags, the Raft started, a new cluster
//!   initialised, and the wait for its first leader.
//! - [`peers`]: the client half of the peer transport (replication, and what followers forward).
//! - [`peer_service`]: the server half, on `--listen-peer-urls`.
//! - [`snapshot_stream`]: a checkpoint's files streamed to a member that fell behind.
//! - [`publish`]: each member's client URLs written into the membership, for MemberList.
//! - [`leadership`]: the lessor made primary when this member leads, and a follower's lessor
//!   asking the leader's.

pub mod leadership;
pub mod peer_service;
pub mod peers;
pub mod publish;
pub mod snapshot_stream;
pub mod start;
