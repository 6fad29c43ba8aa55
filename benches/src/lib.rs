//! actcd's bundled load client, `actcd-bench`.
//!
//! `actcd-bench` load-tests any etcd v3 endpoint (actcd or etcd) with the client-side commands,
//! flags, report and progress bar of etcd's `benchmark` tool. It knows only the wire contract
//! (`actcd-proto`), never the server or the actors. Its code lives in this library so that the
//! report and histogram code is unit-tested in a cheap test binary, and so that other programs
//! (the seed tables, `actcd-tables`) drive the same commands; `main.rs` only calls
//! [`cli::main`].

pub mod cli;
pub mod cmd;
pub mod conn;
pub mod execute;
pub mod format;
pub mod keys;
pub mod output;
pub mod progress;
pub mod report;
pub mod runner;
pub mod settings;
pub mod stamped_events;
pub mod stop;
pub mod watch_streams;
