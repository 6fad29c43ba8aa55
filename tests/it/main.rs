//! actcd's integration tests, in one binary (each test binary links RocksDB).
//!
//! Every test starts its own server processes on free loopback ports with temporary data dirs.

// A failed unwrap is a failed test, which is what these tests want.
#![allow(clippy::unwrap_used)]

// The history, its checker and its workload live in the support crate, which the Raft crate's
// in-process cluster tests use too; named here as the modules they were.
use actcd_test_support::{history, history_check, history_workload};

mod auth;
mod auth_2026;
mod auto_compaction;
mod cli;
mod client;
mod cluster;
mod cluster_ops;
mod concurrency;
mod crash;
mod differential;
mod durable_before_ack;
mod etcdctl;
mod exhaustion;
mod faults;
mod fsync_trace;
mod gateway;
mod harness;
mod history_bugs;
mod history_simulated;
mod hostile_frames;
mod k8s;
mod lease;
mod linearizability;
mod maintenance;
mod member_changes;
mod membership;
mod metrics;
mod migrate;
mod net_faults;
mod netns;
mod packaging;
mod pause;
mod peer_tls;
mod probes;
mod raft_log;
mod range_stream;
mod read_budget;
mod robustness;
mod serving;
mod setup;
mod snapshot_send;
mod tls;
mod watch;
mod watch_stream;
mod watch_validator;
mod write_coalescing;
