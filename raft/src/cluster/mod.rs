//! The member's place in its Raft cluster: openraft started over the store's log and state
//! machine with etcd's timing flags, the ids it starts with, its membership changes, and the
//! watchdogs that run beside it. Everything here reaches the other members through
//! [`crate::network`].
//!
//! # Layout
//! - [`initial_cluster`]: the initial cluster from etcd's bootstrap flags, and etcd's member and
//!   cluster ids.
//! - [`start`]: openraft's configuration from the flags, the Raft started, a new cluster
//!   initialised, and the wait for its first leader.
//! - [`join`]: a member added by MemberAdd finding its ids in the cluster it joins.
//! - [`reconfigure`]: the one place the membership changes (MemberAdd, Remove, Update,
//!   Promote, each member's published record), one change at a time, by etcd's rules.
//! - [`peer_probe`]: each peer asked for the membership: which peers answer, and whether
//!   this member was removed.
//! - [`move_leader`]: MoveLeader, and a stopping leader's hand-over.
//! - [`leadership`]: the lessor made primary when this member leads, and a follower's lessor
//!   asking the leader's.
//! - [`check_quorum`]: etcd's CheckQuorum: a leader no quorum answers steps down.
//! - [`corrupt_check`]: etcd's hash comparisons across members, at start and periodically.
//! - [`auto_compaction`]: etcd's `--auto-compaction-*`: the leader compacts through the log.

pub mod auto_compaction;
pub mod check_quorum;
pub mod corrupt_check;
pub mod initial_cluster;
pub mod join;
pub mod leadership;
pub mod move_leader;
pub mod peer_probe;
pub mod reconfigure;
pub mod start;
