//! The member's place in its Raft cluster: openraft started over the store's log and state
//! machine, with etcd's timing flags, and the peer transport between members.
//!
//! # Layout
//! - [`start`]: openraft's configuration from the flags, the Raft started, a new cluster
//!   initialised, and the wait for its first leader.
//! - [`peers`]: the client half of the peer transport (replication, and what followers forward).
//! - [`peer_service`]: the server half, on `--listen-peer-urls`.
//! - [`snapshot_stream`]: a checkpoint's files streamed to a member that fell behind.
//! - [`reconfigure`]: the one place the membership changes (MemberAdd, Remove, Update,
//!   Promote, each member's published record), one change at a time, by etcd's rules.
//! - [`join`]: a member added by MemberAdd finding its ids in the cluster it joins.
//! - [`peer_probe`]: each peer asked for the membership: which peers answer, and whether
//!   this member was removed.
//! - [`move_leader`]: MoveLeader, and a stopping leader's hand-over.
//! - [`auto_compaction`]: etcd's `--auto-compaction-*`: the leader compacts through the log.
//! - [`check_quorum`]: etcd's CheckQuorum: a leader no quorum answers steps down.
//! - [`corrupt_check`]: etcd's hash comparisons across members, at start and periodically.
//! - [`leadership`]: the lessor made primary when this member leads, and a follower's lessor
//!   asking the leader's.

pub mod auto_compaction;
pub mod check_quorum;
pub mod corrupt_check;
pub mod join;
pub mod leadership;
pub mod move_leader;
pub mod peer_probe;
pub mod peer_service;
pub mod peers;
pub mod reconfigure;
pub mod snapshot_stream;
pub mod start;
