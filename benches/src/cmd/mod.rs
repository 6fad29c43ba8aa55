//! The commands of etcd's benchmark tool that load a server from outside, one module each:
//! its flags (a clap `Args` struct), their checks, and its `run`. Nothing here knows the
//! command line around them; `cli` lists the commands and dispatches.

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
