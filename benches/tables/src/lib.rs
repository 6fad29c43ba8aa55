//! `actcd-tables`: etcd's published benchmark tables reproduced against actcd or etcd, driving
//! the load client (`actcd-bench`'s library) from this separate process and reading the
//! server's memory from `/proc`, as etcd's benchmarks do. Its own crate because it is a second
//! product beside the load client: starting and stopping servers, fitting, tables, charts.
//!
//! # Layout
//! - [`cli`]: the commands of `actcd-tables`.
//! - [`measure`]: `measure`, every table on fresh servers.
//! - [`storetable`]: the storage-memory table: rows, one measured, the table.
//! - [`memtable`]: the watch-memory table: rows, plans, the fit, the table.
//! - [`watch_row`]: `watch-memory`, one row of it measured, or its tables printed.
//! - [`qpstable`]: the put/range QPS table: runs, measured on one server, the table.
//! - [`fanout`]: `fanout`, watch fan-out of actcd and etcd side by side.
//! - [`tablesdoc`]: a measure run's JSON, tables and charts, and `compare` of two runs.
//! - [`outcome`]: what every memory row records of its server, and the rows' lists.
//! - [`fit`]: the least-squares fit of the per-item figures.
//! - [`chart`]: the PNG charts.
//! - [`server`]: the servers started: binaries, data dirs, a load on a fresh one.
//! - [`results`]: where a run's files go, and their UTC names.

pub mod chart;
pub mod cli;
pub mod fanout;
pub mod fit;
pub mod measure;
pub mod memtable;
pub mod outcome;
pub mod qpstable;
pub mod results;
pub mod server;
pub mod storetable;
pub mod tablesdoc;
pub mod watch_row;
