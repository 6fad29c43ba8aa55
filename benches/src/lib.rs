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
//! - [`cli`]: the commands of `actcd-bench`.
//! - [`cmd`]: one module per command: its flags, their checks, its run.
//! - [`conn`]: dialing the endpoints, auth tokens, and the error texts of the report.
//! - [`execute`]: the command line and the process: runtime, Ctrl-C, exit code.
//! - [`format`]: numbers as etcd's report and tables write them.
//! - [`keys`]: etcd benchmark's keys, and random bytes.
//! - [`output`]: the report text or JSON document, and the client's own CPU use.
//! - [`progress`]: the progress bar.
//! - [`report`]: latency recording, and etcd benchmark's report.
//! - [`runner`]: the load loop of the request/response commands, and the stall watchdog.
//! - [`settings`]: the flags every command takes.
//! - [`stamped_events`]: watch responses decoded only as far as the watch commands read them.
//! - [`stop`]: the stop signal of a run.
//! - [`watch_streams`]: watch streams opened, and events timed from their puts' send times.

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
