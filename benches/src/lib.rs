//! actcd's bundled load client, `actcd-bench`.
//!
//! `actcd-bench` load-tests any etcd v3 endpoint (actcd or etcd) with the client-side commands,
//! flags, report and progress bar of etcd's `benchmark` tool. It knows only the wire contract
//! (`actcd-proto`), never the server or the actors. Its code lives in this library so that the
//! report and histogram code is unit-tested in a cheap test binary, and so that other programs
//! (the seed tables, `actcd-tables`) drive the same commands; `main.rs` only calls
//! [`cli::main`].
//!
//! # Layout
//! - [`cli`]: the command line: the global flags and one variant per command, dispatched.
//! - [`cmd`]: the commands, one module each with its flags and its run.
//! - [`settings`]: the global flags, checked, as the settings a command runs with.
//! - [`execute`]: one command as a process: runtime, Ctrl-C, output, exit code.
//! - [`runner`]: the load loop (clients over connections, the rate schedule measured from the
//!   intended send time) and the stall watchdog.
//! - [`stop`]: the stop signal a run ends on, with its reason.
//! - [`output`]: etcd's report text as it goes, or one JSON document at the end.
//! - [`progress`]: the progress bar.
//! - [`report`]: latency recording (sharded HDR histograms with exact min/max/mean/stddev) and
//!   the report in etcd's text format or as JSON.
//! - [`format`]: Go-compatible number and byte-size formatting for the report.
//! - [`cpu`]: the client's own CPU use.
//! - [`keys`]: etcd benchmark's key encoding (zig-zag varints) and a small PRNG.
//! - [`conn`]: endpoints, dialing one gRPC channel per connection, error texts.
//! - [`stamped_events`]: the part of a Watch response the watch commands read, decoded alone.
//! - [`watch_streams`]: watch streams opened one create at a time and events timed from the
//!   put that caused them, for the watch commands.
#![deny(missing_docs)]

pub mod cli;
pub mod cmd;
pub mod conn;
pub mod cpu;
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
