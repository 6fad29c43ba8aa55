//! The commands of etcd's benchmark tool that load a server from outside, one module each:
//! its flags (a clap `Args` struct), their checks, and its `run`. Nothing here knows the
//! command line around them; `cli` lists the commands and dispatches.
//!
//! # Layout
//! - [`put`]: puts of random or sequential keys, with compaction and a HashKV check.
//! - [`range`]: the same Range request over and over, linearizable or serializable.
//! - [`txn_put`]: transactions of `--txn-ops` puts.
//! - [`txn_mixed`]: transactions of one range or one put, reads and writes reported apart.
//! - [`watch`]: watch creation, then the events delivered for concurrent puts.
//! - [`watch_get`]: serializable gets while many watchers catch up from an old revision.
//! - [`watch_latency`]: from a put's send to each watcher's event.
//! - [`watch_fanout`]: many watchers of one key, events delivered per second.
//! - [`lease_keepalive`]: one short keep-alive stream per request.
//! - [`authenticate`]: Authenticate with one name and password, right or wrong.
//! - [`failover`]: the longest stretch with no acknowledged put while a member is killed.
//! - [`k8s`]: the traffic of a Kubernetes apiserver (its storage layer's requests).
//! - [`stm`]: etcd's software transactional memory, at its four isolation levels, optionally
//!   under a lock.

pub mod authenticate;
pub mod failover;
pub mod k8s;
pub mod lease_keepalive;
pub mod put;
pub mod range;
pub mod stm;
pub mod txn_mixed;
pub mod txn_put;
pub mod watch;
pub mod watch_fanout;
pub mod watch_get;
pub mod watch_latency;
