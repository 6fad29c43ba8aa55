//! `actcd-tables`: etcd's published benchmark tables reproduced against actcd or etcd, driving
//! the load client (`actcd-bench`'s library) from this separate process and reading the
//! server's memory from `/proc`, as etcd's benchmarks do. Its own crate because it is a second
//! product beside the load client: starting and stopping servers, fitting, tables, charts.
//!
//! # Layout
//! - [`cli`]: the command line: `measure`, `compare`, `watch-memory`, `fanout`.
//! - [`measure`]: the tables in one run, a fresh server per memory row, JSON and charts.
//! - [`compare`]: two runs side by side with the ratios, and their charts.
//! - [`watch_row`]: one row of the watch-memory table, and the table of rows measured earlier.
//! - [`fanout`]: watch fan-out against actcd and etcd, the median of repeats side by side.
//! - [`storage_row`]: one row of the storage-memory table.
//! - [`memtable`]: etcd's watch-memory table: rows, the plan (does a row fit the machine), the
//!   table in etcd's layout with c1, c2, c3 under it.
//! - [`fit`]: the least-squares fit of every table's per-item figures.
//! - [`units`]: counts and bytes as etcd's tables write them.
//! - [`storetable`]: etcd's storage-memory table (N keys × versions × key size × value size:
//!   server RSS): rows, the per-key and per-version fit, the table in etcd's layout.
//! - [`qpstable`]: the put/range QPS table of etcd's performance doc: runs and layout.
//! - [`outcome`]: what a memory row records about the server: ran or skipped, RSS before and
//!   after.
//! - [`tablesdoc`]: a run's results (the JSON), their tables, charts and the side by side of
//!   two runs.
//! - [`chart`]: PNG charts (grouped bars, lines on a log axis).
//! - [`stamp`]: when a run happened, as its files and summaries name it.
//! - [`server`]: starting actcd or etcd on loopback on a fresh data dir, stopping it by pid.
#![deny(missing_docs)]

pub mod chart;
pub mod cli;
pub mod compare;
pub mod fanout;
pub mod fit;
pub mod measure;
pub mod memtable;
pub mod outcome;
pub mod qpstable;
pub mod server;
pub mod stamp;
pub mod storage_row;
pub mod storetable;
pub mod tablesdoc;
pub mod units;
pub mod watch_row;
