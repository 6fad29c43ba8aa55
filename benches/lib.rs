//! actcd's bundled load client, `actcd-bench`, and its benchmarks.
//!
//! `actcd-bench` load-tests any etcd v3 endpoint (actcd or etcd) with the commands, flags and
//! report of etcd's `benchmark` tool. It knows only the wire contract (`actcd-proto`), never the
//! server or the actors. Its code lives here so that the report and histogram code is unit-tested
//! in a cheap test binary; `src/main.rs` only calls [`cli::main`].
//!
//! # Layout
//! - `src/cli.rs`: the command line (etcd benchmark's global flags and commands) and dispatch.
//! - `src/report.rs`: latency recording (sharded HDR histograms with exact min/max/mean/stddev)
//!   and the report in etcd's text format or as JSON.
//! - `src/format.rs`: Go-compatible number, duration and byte-size formatting for the report.
//! - `src/cpu.rs`: the client's own CPU use, from `/proc/self/stat`.
//! - `src/keys.rs`: etcd benchmark's key encoding (zig-zag varints), a small PRNG, range ends.
//! - `src/conn.rs`: endpoints, dialing one gRPC channel per connection, error texts.
//! - `src/procfs.rs`: a process's resident memory, name and open-file limit, and the memory
//!   available, from `/proc`.
//! - `src/memtable.rs`: etcd's watch-memory table: rows, the plan (does a row fit the machine),
//!   the least-squares fit of c1, c2, c3, the table in etcd's layout.
//! - `src/storetable.rs`: etcd's storage-memory table (N keys × versions × key size × value
//!   size: server RSS): rows, the per-key and per-version fit, the table in etcd's layout.
//! - `src/qpstable.rs`: the put/range QPS table of etcd's performance doc: runs and layout.
//! - `src/outcome.rs`: what a memory row records about the server: ran or skipped, RSS before
//!   and after.
//! - `src/tablesdoc.rs`: a `tables` run's results (the JSON), their tables, charts and the side
//!   by side of two runs.
//! - `src/chart.rs`: PNG charts (grouped bars, lines on a log axis) with a built-in bitmap font.
//! - `src/server.rs`: starting actcd or etcd on loopback on a fresh data dir, stopping it by pid.
//! - `src/runner.rs`: the load loop: clients over connections, the rate schedule (measured from
//!   the intended send time), stop on Ctrl-C, stall watchdog, progress bar.
//! - `src/cmd/`: one file per command family: `put`, `range`, `txn` (txn-put, txn-mixed),
//!   `watch` (watch, watch-latency, watch-fanout), `watch_memory` (one row of the watch-memory
//!   table, and the offline modes --list, --plan, --table), `storage_memory` (one row of the
//!   storage-memory table), `tables` (the three tables in one command, JSON and charts, and
//!   `--compare`) and `lease` (lease-keepalive).
//! - `benches/index_memory.rs`: the revision index's bytes per key and per version, row for row
//!   with etcd's storage-memory table, with the fitted c1 and c2.
//! - `compare`: the QPS table (`tables --only qps`) against Debian's etcd 3.4 and actcd, and
//!   the ratios (`tables --compare`).
//! - `watch-memory`: etcd's watch-memory table (`tables --only watch`), one fresh server per row.
//! - `watch-fanout`: watch fan-out (1000 watchers of one key) against actcd and etcd, the ratio.
//! - `server.sh`: starting and stopping actcd or etcd on loopback (watch-fanout), and freezing
//!   the binaries a script runs.
#![deny(missing_docs)]

#[path = "src/chart.rs"]
pub mod chart;
#[path = "src/cli.rs"]
pub mod cli;
#[path = "src/cmd/mod.rs"]
pub mod cmd;
#[path = "src/conn.rs"]
pub mod conn;
#[path = "src/cpu.rs"]
pub mod cpu;
#[path = "src/format.rs"]
pub mod format;
#[path = "src/keys.rs"]
pub mod keys;
#[path = "src/memtable.rs"]
pub mod memtable;
#[path = "src/outcome.rs"]
pub mod outcome;
#[path = "src/procfs.rs"]
pub mod procfs;
#[path = "src/qpstable.rs"]
pub mod qpstable;
#[path = "src/report.rs"]
pub mod report;
#[path = "src/runner.rs"]
pub mod runner;
#[path = "src/server.rs"]
pub mod server;
#[path = "src/storetable.rs"]
pub mod storetable;
#[path = "src/tablesdoc.rs"]
pub mod tablesdoc;
