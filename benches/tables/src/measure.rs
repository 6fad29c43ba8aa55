//! `actcd-tables measure`: etcd's published benchmark tables reproduced by one command, from
//! this separate process: the storage-memory table (server RSS after N keys × versions), the watch-memory
//! table (server RSS with clients × streams × watches, and the fitted c1, c2, c3) and the
//! put/range QPS table of etcd's performance doc. Printed in etcd's layout, and written as JSON,
//! markdown and PNG charts into `--out`, by default `$ACTCD_BENCH_RESULTS/<UTC date>/` or
//! `~/actcd-bench-results/<UTC date>/`, outside the source tree.
//!
//! A memory row only means something on a fresh server, so with `--server actcd|etcd` the
//! command starts the server itself on loopback, on a fresh data dir, for every memory row (and
//! once for the QPS runs), and stops it by its pid afterwards. Against a server it did not start
//! (`--endpoints` and `--pid`) it measures the first memory row only and reports the others as
//! skipped, saying how to measure them. A row too large for the machine (memory over the budget
//! or what is free, backend over the quota, an estimated time over the row limit) is reported
//! as skipped with the reason, never dropped.

use crate::memtable::{self, Limits, Row, RowResult, Verdict};
use crate::outcome::Outcome;
use crate::qpstable::{self, Op, QpsResult, QpsRun};
use crate::server::{default_binary, Spec};
use crate::stamp::Utc;
use crate::storage_row;
use crate::storetable::{self, StoreResult, StoreRow};
use crate::tablesdoc::{self, TablesDoc};
use crate::watch_row::{self, deadline, RowOptions};
use actcd_bench::cmd::put::PutArgs;
use actcd_bench::cmd::range::RangeArgs;
use actcd_bench::conn::{bounded, dial_one, kv_client};
use actcd_bench::format as units;
use actcd_bench::output::Out;
use actcd_bench::output::{cpu_now, ClientCpu};
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_proto::etcdserverpb::PutRequest;
use actcd_proto::go_duration::parse as parse_go_duration;
use actcd_test_support::procfs;
use actcd_test_support::server::{self as launcher, Kind};
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// `--quick` watch rows: conns, streams and watches each varied on their own (enough for the
/// fit of c1, c2, c3), a few seconds in all.
const QUICK_WATCH_ROWS: &str = "100x1x1,200x1x1,100x10x1,100x10x10";
/// The QPS runs' requests at 1 × 1 and at 100 × 1000: etcd's doc, and `--quick`.
const QPS_TOTALS: (u64, u64) = (10_000, 100_000);
const QUICK_QPS_TOTALS: (u64, u64) = (300, 3000);
/// Connections and clients that load a storage row: the doc's put shape, enough concurrency
/// for either server to batch its commits.
const LOAD_CONNS: usize = 100;
const LOAD_CLIENTS: usize = 1000;
/// Estimates are multiplied by this before they are compared with the machine.
const MARGIN: f64 = 1.25;
/// Streams being opened at once in a watch row.
const OPEN_CONCURRENCY: usize = 256;

/// `measure`'s flags.
#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    /// Start this server (actcd or etcd) itself on loopback: a fresh one, on a fresh data dir,
    /// for every row of the memory tables and one for the QPS runs. Without it, the server at
    /// --endpoints whose pid is --pid is measured.
    #[arg(long)]
    pub server: Option<String>,
    /// The server's binary (default: actcd next to actcd-bench; etcd on PATH or /usr/bin/etcd).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// The pid of the server at --endpoints (its RSS is read from /proc/PID/status).
    #[arg(long)]
    pub pid: Option<u32>,
    /// A few small rows of each table and small request counts (about a minute): a smoke test.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub quick: bool,
    /// The tables to run: storage, watch, qps (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "storage,watch,qps")]
    pub only: Vec<String>,
    /// Storage rows: etcd (its 8 rows; the default), quick, or a list of
    /// KEYSxVERSIONSxKEYSIZExVALUESIZE like 100kx5x64x256.
    #[arg(long)]
    pub storage_rows: Option<String>,
    /// Watch rows: all (etcd's 15; the default), quick, small, big, or a list of
    /// CLIENTSxSTREAMSxWATCHES like 1kx10x1.
    #[arg(long)]
    pub watch_rows: Option<String>,
    /// Requests of each QPS run at 1 conn / 1 client (etcd's doc: 10000).
    #[arg(long)]
    pub qps_small: Option<u64>,
    /// Requests of each QPS run at 100 conns / 1000 clients (etcd's doc: 100000).
    #[arg(long)]
    pub qps_large: Option<u64>,
    /// Where the JSON, the tables and the charts go (default $ACTCD_BENCH_RESULTS/<UTC date>,
    /// or ~/actcd-bench-results/<UTC date> when that is not set).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Parent of the temp dir that holds the started servers' data dirs and logs.
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    /// Wait after a row's load before reading the server's RSS.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub settle: Duration,
    /// Most memory (GiB) server and client may take together in a row; bigger rows are skipped.
    #[arg(long, default_value_t = 16)]
    pub max_mem_gib: u64,
    /// Memory (MiB) kept free for the rest of the machine.
    #[arg(long, default_value_t = 2048)]
    pub reserve_mib: u64,
    /// Longest estimated time a row may take; longer rows are skipped (and a row that runs
    /// over it is stopped).
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub row_time_limit: Duration,
    /// --quota-backend-bytes of the servers started with --server (etcd's default 2 GiB is
    /// too small for 1M keys x 5 versions of 1 KiB).
    #[arg(long, default_value_t = 8 << 30)]
    pub quota_backend_bytes: u64,
}

impl MeasureArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
        selected(a)?;
        match (&a.server, a.pid) {
            (Some(_), Some(_)) => {
                return Err("--server starts its own server and --pid names one already running: give one of them".to_string())
            }
            (None, None) => {
                return Err("give --server actcd|etcd (measure starts it, fresh for every memory row), or --pid PID of the server at --endpoints".to_string())
            }
            (Some(s), None) => {
                Kind::parse(s)?;
            }
            (None, Some(_)) if a.server_bin.is_some() => {
                return Err("--server-bin goes with --server".to_string());
            }
            (None, Some(_)) => {}
        }
        storetable::parse_rows(storage_spec(a))?;
        memtable::parse_rows(watch_spec(a))?;
        let (small, large) = qps_totals(a);
        if small == 0 || large == 0 {
            return Err("--qps-small and --qps-large must be at least 1".to_string());
        }
        if a.max_mem_gib == 0 {
            return Err("--max-mem-gib must be at least 1".to_string());
        }
        Ok(())
    }

    /// Runs the tables (validated flags).
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        // Thousands of connections need as many file descriptors, here and in the servers started
        // (they inherit the limit).
        if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
            out.note(format!("warning: cannot raise the open-file limit: {e}"));
        }
        let now = Utc::now();
        let started = Instant::now();
        let Ok(tables) = selected(&a) else { return };
        let work = match tempfile::Builder::new().prefix("actcd-tables.").tempdir_in(&a.work_dir) {
            Ok(w) => w,
            Err(e) => {
                stop.stop(format!("cannot create a temp dir in {}: {e}", a.work_dir.display()));
                return;
            }
        };
        let (target, name, version, mode) = match (&a.server, a.pid) {
            (Some(kind), _) => {
                let Ok(kind) = Kind::parse(kind) else { return };
                let binary = a.server_bin.clone().map(Ok).unwrap_or_else(|| default_binary(kind));
                let Some(binary) = stop.check(binary) else { return };
                let spec = Spec {
                    kind,
                    binary,
                    work: work.path().to_path_buf(),
                    quota_bytes: a.quota_backend_bytes,
                };
                let version = spec.version();
                let mode = format!(
                    "{} started by tables on loopback: a fresh one on a fresh data dir per memory row, one for the QPS runs; --quota-backend-bytes {}; RSS = the server's VmRSS",
                    spec.binary.display(),
                    a.quota_backend_bytes
                );
                (Target::Start(spec), kind.name().to_string(), version, mode)
            }
            (None, Some(pid)) => {
                let name = procfs::name(procfs::Proc::Pid(pid));
                if name.is_empty() {
                    stop.stop(format!("--pid {pid}: no such process (or /proc/{pid} is not readable)"));
                    return;
                }
                let mode = format!(
                    "the server at {} (pid {pid}), given: only its first memory row is on a fresh server; RSS = its VmRSS",
                    settings.endpoints.join(",")
                );
                (
                    Target::Given { endpoints: settings.endpoints.clone(), pid, used: None },
                    name,
                    String::new(),
                    mode,
                )
            }
            (None, None) => return,
        };
        let mut runner = Runner { base: settings, stop, out, a: &a, target, name: name.clone() };
        let mut doc = TablesDoc {
            server: name,
            server_version: version,
            date: now.line.clone(),
            machine: procfs::machine_line(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            mode,
            storage: Vec::new(),
            watch: Vec::new(),
            qps: Vec::new(),
            total_secs: 0.0,
        };
        for t in tables {
            match t {
                Table::Storage => {
                    let rows = storetable::parse_rows(storage_spec(&a)).unwrap_or_default();
                    doc.storage = runner.memory_rows::<StorageTable>(rows).await;
                }
                Table::Watch => {
                    let mut rows = memtable::parse_rows(watch_spec(&a)).unwrap_or_default();
                    // Smallest first: each row's estimate is fitted from the rows measured before it.
                    rows.sort_by_key(|r| (r.watches(), r.streams(), r.clients));
                    doc.watch = runner.memory_rows::<WatchTable>(rows).await;
                }
                Table::Qps => {
                    let (small, large) = qps_totals(&a);
                    doc.qps = runner.qps(qpstable::runs(small, large)).await;
                }
            }
        }
        doc.total_secs = started.elapsed().as_secs_f64();
        let text = tablesdoc::text(&doc);
        out.print(&text);
        match tablesdoc::save(
            &out_dir(a.out.as_deref(), &now),
            &format!("{}-{}", now.stamp, doc.server),
            &doc,
            &text,
        ) {
            Ok(paths) => {
                for p in paths {
                    eprintln!("tables: wrote {}", p.display());
                }
            }
            Err(e) => stop.stop(e),
        }
        match serde_json::to_value(&doc) {
            Ok(v) => out.extra("tables", v),
            Err(e) => out.note(format!("error: cannot encode the tables: {e}")),
        }
        let failed = doc.incomplete();
        if failed > 0 {
            stop.stop(format!("{failed} rows did not complete (see the tables)"));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Storage,
    Watch,
    Qps,
}

fn selected(a: &MeasureArgs) -> Result<Vec<Table>, String> {
    let mut v = Vec::new();
    for t in &a.only {
        let table = match t.trim() {
            "storage" => Table::Storage,
            "watch" => Table::Watch,
            "qps" => Table::Qps,
            other => return Err(format!("--only takes storage, watch and qps, got {other:?}")),
        };
        if !v.contains(&table) {
            v.push(table);
        }
    }
    if v.is_empty() {
        return Err("--only is empty".to_string());
    }
    Ok(v)
}

fn storage_spec(a: &MeasureArgs) -> &str {
    a.storage_rows.as_deref().unwrap_or(if a.quick { "quick" } else { "etcd" })
}

fn watch_spec(a: &MeasureArgs) -> &str {
    a.watch_rows.as_deref().unwrap_or(if a.quick { QUICK_WATCH_ROWS } else { "all" })
}

fn qps_totals(a: &MeasureArgs) -> (u64, u64) {
    let (small, large) = if a.quick { QUICK_QPS_TOTALS } else { QPS_TOTALS };
    (a.qps_small.unwrap_or(small), a.qps_large.unwrap_or(large))
}

/// A server for one row or one table: started for it (and stopped when this is dropped), or
/// the one given.
struct Server {
    pid: u32,
    endpoints: Vec<String>,
    started: Option<launcher::Server>,
}

impl Server {
    /// Whether it still runs; for a started one, the end of its log when it died.
    fn died(&mut self) -> Option<String> {
        match &mut self.started {
            Some(r) => (!r.alive())
                .then(|| format!("the server died during the row; the end of its log: {}", r.log_tail())),
            None => {
                procfs::memory(procfs::Proc::Pid(self.pid)).err().map(|e| format!("the server is gone: {e}"))
            }
        }
    }
}

enum Target {
    Start(Spec),
    /// Given: one server; `used` names the memory row that ran on it (a later one would not
    /// measure a fresh server).
    Given {
        endpoints: Vec<String>,
        pid: u32,
        used: Option<String>,
    },
}

/// A memory table as the run loop sees it: its rows, whether a row fits (given the rows
/// measured before it), and how one row is measured on a fresh server.
trait MemoryTable {
    type Row: Copy;
    type Result;
    /// The table's name in progress lines.
    const NAME: &'static str;
    fn spec(row: &Self::Row) -> String;
    /// Why `row` must be skipped, if it must.
    fn plan(runner: &Runner<'_>, row: &Self::Row, before: &[Self::Result]) -> Option<String>;
    fn new(row: Self::Row, outcome: Outcome) -> Self::Result;
    fn outcome(r: &mut Self::Result) -> &mut Outcome;
    async fn measure(runner: &Runner<'_>, server: &Server, stop: &Stop, row: Self::Row) -> Self::Result;
}

struct StorageTable;

impl MemoryTable for StorageTable {
    type Row = StoreRow;
    type Result = StoreResult;
    const NAME: &'static str = "storage";

    fn spec(row: &StoreRow) -> String {
        row.spec()
    }

    fn plan(runner: &Runner<'_>, row: &StoreRow, before: &[StoreResult]) -> Option<String> {
        let gb = |b: f64| b / 1e9;
        if let Target::Start(spec) = &runner.target {
            let backend = row.bytes() as f64 * 1.3;
            if backend > spec.quota_bytes as f64 {
                return Some(format!(
                    "its ~{:.1} GB of backend is over --quota-backend-bytes ({:.1} GB)",
                    gb(backend),
                    gb(spec.quota_bytes as f64)
                ));
            }
        }
        // The idle server and the load client, plus the most RSS per byte loaded seen so far
        // (at least the row's high estimate).
        let per_byte = before
            .iter()
            .filter(|r| r.complete())
            .map(|r| r.outcome.delta_bytes() / r.row.bytes() as f64)
            .fold(0.0, f64::max);
        let need = (300e6 + row.high_estimate().max(per_byte * row.bytes() as f64)) * MARGIN;
        if let Some(why) = memtable::memory_room(need, &watch_row::machine(None), &runner.limits()) {
            return Some(format!("needs ~{:.1} GB, {why}", gb(need)));
        }
        let rate = before.iter().rev().find_map(StoreResult::bytes_per_sec)?;
        let secs = row.bytes() as f64 / rate * MARGIN;
        (secs > runner.a.row_time_limit.as_secs_f64()).then(|| {
            format!(
                "its load would take ~{secs:.0} s at the {:.1} MB/s of the previous row, over the {:?} row time limit",
                rate / 1e6,
                runner.a.row_time_limit
            )
        })
    }

    fn new(row: StoreRow, outcome: Outcome) -> StoreResult {
        StoreResult::new(row, outcome)
    }

    fn outcome(r: &mut StoreResult) -> &mut Outcome {
        &mut r.outcome
    }

    async fn measure(runner: &Runner<'_>, server: &Server, stop: &Stop, row: StoreRow) -> StoreResult {
        let settings = runner.settings(
            &server.endpoints,
            LOAD_CONNS,
            LOAD_CLIENTS,
            runner.base.request_timeout.max(Duration::from_secs(60)),
        );
        storage_row::measure(&settings, stop, row, server.pid, runner.name.clone(), runner.a.settle).await
    }
}

struct WatchTable;

impl MemoryTable for WatchTable {
    type Row = Row;
    type Result = RowResult;
    const NAME: &'static str = "watch";

    fn spec(row: &Row) -> String {
        row.spec()
    }

    fn plan(runner: &Runner<'_>, row: &Row, before: &[RowResult]) -> Option<String> {
        let models = memtable::models_from(before);
        match memtable::plan(row, &watch_row::machine(None), &runner.limits(), &models) {
            Verdict::Skip(why) => Some(why),
            Verdict::Run { .. } => None,
        }
    }

    fn new(row: Row, outcome: Outcome) -> RowResult {
        RowResult::new(row, outcome)
    }

    fn outcome(r: &mut RowResult) -> &mut Outcome {
        &mut r.outcome
    }

    async fn measure(runner: &Runner<'_>, server: &Server, stop: &Stop, row: Row) -> RowResult {
        let settings = runner.settings(&server.endpoints, 1, 1, runner.base.request_timeout);
        let out = Out::new("watch-memory", &settings);
        let opts = RowOptions {
            settle: runner.a.settle,
            open_concurrency: OPEN_CONCURRENCY,
            time_limit: runner.a.row_time_limit,
        };
        watch_row::measure(&settings, stop, &out, &opts, row, server.pid, runner.name.clone()).await
    }
}

struct Runner<'a> {
    base: &'a Settings,
    stop: &'a Stop,
    out: &'a Out,
    a: &'a MeasureArgs,
    target: Target,
    name: String,
}

/// A stop signal for one row that the run's own (Ctrl-C) also sets, with the forwarding task.
pub fn row_stop(parent: &Stop) -> (Stop, JoinHandle<()>) {
    let child = Stop::new();
    let (p, c) = (parent.clone(), child.clone());
    let forward = tokio::spawn(async move {
        p.stopped().await;
        c.stop(p.reason().unwrap_or_else(|| "stopped".to_string()));
    });
    (child, forward)
}

impl Runner<'_> {
    fn settings(
        &self,
        endpoints: &[String],
        conns: usize,
        clients: usize,
        request_timeout: Duration,
    ) -> Settings {
        Settings {
            endpoints: endpoints.to_vec(),
            conns,
            clients,
            sample: false,
            json: true,
            request_timeout,
            ..self.base.clone()
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            reserve: self.a.reserve_mib << 20,
            max_secs: self.a.row_time_limit.as_secs_f64(),
            margin: MARGIN,
            budget: self.a.max_mem_gib << 30,
        }
    }

    /// A server for `what`; for a memory row (`fresh`), one nothing ran on before. `Err` is
    /// the reason to skip.
    async fn server(&mut self, what: &str, fresh: bool) -> Result<Server, String> {
        match &mut self.target {
            Target::Start(spec) => {
                let running = spec.start(what, Duration::from_secs(30)).await?;
                Ok(Server {
                    pid: running.pid(),
                    endpoints: vec![running.endpoint.clone()],
                    started: Some(running),
                })
            }
            Target::Given { endpoints, pid, used } => {
                if fresh {
                    if let Some(first) = used {
                        return Err(format!(
                            "needs a fresh server (memory row {first} already ran on pid {pid}): restart it and run `actcd-tables measure --pid PID --only storage|watch --storage-rows|--watch-rows {what}`, or let measure start one per row with --server actcd|etcd"
                        ));
                    }
                    *used = Some(what.to_string());
                }
                Ok(Server { pid: *pid, endpoints: endpoints.clone(), started: None })
            }
        }
    }

    /// Runs a memory table's rows in order, each on a fresh server, or records it as skipped
    /// with the reason (interrupted, too large, no fresh server to be had).
    async fn memory_rows<T: MemoryTable>(&mut self, rows: Vec<T::Row>) -> Vec<T::Result> {
        let mut results: Vec<T::Result> = Vec::new();
        for row in rows {
            let spec = T::spec(&row);
            let skip = if self.stop.is_stopped() {
                Some("interrupted".to_string())
            } else {
                T::plan(self, &row, &results)
            };
            let mut server = match skip {
                Some(why) => Err(why),
                None => self.server(&spec, true).await,
            };
            let r = match &mut server {
                Err(why) => {
                    eprintln!("tables: {} {spec}: skipped: {why}", T::NAME);
                    T::new(row, Outcome::skipped(self.name.clone(), why.clone()))
                }
                Ok(s) => {
                    eprintln!("tables: {} {spec}: measuring on pid {}...", T::NAME, s.pid);
                    let (stop, forward) = row_stop(self.stop);
                    let limit = deadline(&stop, self.a.row_time_limit + self.a.settle);
                    let mut r = T::measure(self, &*s, &stop, row).await;
                    limit.abort();
                    forward.abort();
                    let outcome = T::outcome(&mut r);
                    if let Some(why) = s.died() {
                        outcome.fail(why);
                    }
                    eprintln!(
                        "tables: {} {spec}: {} RSS (idle {}){}",
                        T::NAME,
                        units::mb(outcome.rss_bytes()),
                        units::mb(outcome.idle_bytes()),
                        outcome.failed.as_ref().map(|f| format!("; incomplete: {f}")).unwrap_or_default()
                    );
                    r
                }
            };
            drop(server);
            results.push(r);
        }
        results
    }

    async fn qps(&mut self, runs: Vec<QpsRun>) -> Vec<QpsResult> {
        let mut results = Vec::new();
        let server = if self.stop.is_stopped() {
            Err("interrupted".to_string())
        } else {
            self.server("qps", false).await
        };
        let mut server = match server {
            Ok(s) => s,
            Err(why) => {
                self.out.note(format!("tables: qps: no server: {why}"));
                return results;
            }
        };
        let mut key_written = false;
        for run in runs {
            if self.stop.is_stopped() {
                break;
            }
            let settings =
                self.settings(&server.endpoints, run.conns, run.clients, self.base.request_timeout);
            let (stop, forward) = row_stop(self.stop);
            let out = Out::new(&run.name(), &settings);
            let (cpu_start, started) = (cpu_now(), Instant::now());
            if run.op == Op::Put {
                let a = PutArgs::sequential(qpstable::KEY_SIZE, qpstable::VAL_SIZE, run.total, run.total);
                a.run(&settings, &stop, &out).await;
            } else {
                if !key_written {
                    if let Err(e) = put_range_key(&settings).await {
                        stop.stop(e);
                    }
                    key_written = true;
                }
                let consistency = if run.op == Op::RangeSerializable { "s" } else { "l" };
                let a = RangeArgs::of_key(RANGE_KEY, consistency, run.total);
                a.run(&settings, &stop, &out).await;
            }
            let client_cores =
                ClientCpu::measure(cpu_start, started.elapsed()).map(|c| c.cores_used).unwrap_or(0.0);
            forward.abort();
            let doc = out.document();
            let stats = doc.reports.first();
            let r = QpsResult {
                run,
                server: self.name.clone(),
                failed: stop.reason().or_else(|| server.died()),
                requests: stats.map(|s| s.requests).unwrap_or(0),
                errors: stats.map(|s| s.errors).unwrap_or(0),
                qps: stats.map(|s| s.requests_per_sec).unwrap_or(0.0),
                average_secs: stats.map(|s| s.average_secs).unwrap_or(0.0),
                p99_secs: stats.and_then(|s| s.percentile(99.0)).unwrap_or(0.0),
                server_rss_kb: procfs::memory(procfs::Proc::Pid(server.pid)).map(|m| m.rss_kb).unwrap_or(0),
                client_cores,
            };
            eprintln!(
                "tables: qps {}: {:.0} requests/s, avg {:.2} ms, client {:.2} cores{}",
                run.name(),
                r.qps,
                r.average_secs * 1e3,
                r.client_cores,
                r.failed.as_ref().map(|f| format!("; stopped: {f}")).unwrap_or_default()
            );
            results.push(r);
        }
        results
    }
}

/// The key the ranges read.
const RANGE_KEY: &str = "foo";

/// Puts [`RANGE_KEY`] with a value of the doc's size, so that the ranges read one real key.
async fn put_range_key(settings: &Settings) -> Result<(), String> {
    let req = PutRequest {
        key: Bytes::from_static(RANGE_KEY.as_bytes()),
        value: Bytes::from(vec![b'v'; qpstable::VAL_SIZE]),
        ..Default::default()
    };
    bounded(settings.request_timeout, kv_client(dial_one(settings).await?).put(req))
        .await
        .map_err(String::from)
        .map_err(|e| format!("putting the key the ranges read: {e}"))?;
    Ok(())
}

const RESULTS_DIR_NAME: &str = "actcd-bench-results";

/// Where results go without `--out`: `$ACTCD_BENCH_RESULTS`, else `~/actcd-bench-results`, so
/// that a run started from a clone never writes into its source tree. Without either variable,
/// `actcd-bench-results` in the current directory.
fn results_root(configured: Option<OsString>, home: Option<OsString>) -> PathBuf {
    match (configured.filter(|d| !d.is_empty()), home.filter(|h| !h.is_empty())) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(home)) => PathBuf::from(home).join(RESULTS_DIR_NAME),
        (None, None) => PathBuf::from(RESULTS_DIR_NAME),
    }
}

/// Where a run's files go: `out`, else the results root's `<UTC date>` folder.
pub fn out_dir(out: Option<&Path>, now: &Utc) -> PathBuf {
    out.map(Path::to_path_buf).unwrap_or_else(|| {
        results_root(std::env::var_os("ACTCD_BENCH_RESULTS"), std::env::var_os("HOME")).join(&now.date)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        measure: MeasureArgs,
    }

    fn args(argv: &[&str]) -> MeasureArgs {
        let mut full = vec!["measure"];
        full.extend_from_slice(argv);
        Line::try_parse_from(full).expect("parses").measure
    }

    #[test]
    fn flags_name_one_server() {
        assert!(args(&["--server", "actcd"]).validate().is_ok());
        assert!(args(&["--pid", "1", "--only", "qps"]).validate().is_ok());
        assert!(args(&[]).validate().is_err());
        assert!(args(&["--server", "actcd", "--pid", "1"]).validate().is_err());
        assert!(args(&["--server", "consul"]).validate().is_err());
        assert!(args(&["--pid", "1", "--server-bin", "/bin/x"]).validate().is_err());
        assert!(args(&["--server", "etcd", "--only", "storage,disk"]).validate().is_err());
        assert!(args(&["--server", "etcd", "--storage-rows", "1x1"]).validate().is_err());
        assert!(args(&["--server", "etcd", "--qps-small", "0"]).validate().is_err());
        let q = args(&["--server", "actcd", "--quick"]);
        assert_eq!(storage_spec(&q), "quick");
        assert_eq!(qps_totals(&q), QUICK_QPS_TOTALS);
    }

    #[test]
    fn results_default_outside_the_source_tree() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(results_root(os("/data/runs"), os("/home/u")), PathBuf::from("/data/runs"));
        assert_eq!(results_root(None, os("/home/u")), PathBuf::from("/home/u/actcd-bench-results"));
        assert_eq!(results_root(os(""), os("/home/u")), PathBuf::from("/home/u/actcd-bench-results"));
        assert_eq!(results_root(None, None), PathBuf::from("actcd-bench-results"));
        let now = Utc::at(jiff::Timestamp::UNIX_EPOCH);
        let given = args(&["--server", "actcd", "--out", "/tmp/x"]);
        assert_eq!(out_dir(given.out.as_deref(), &now), PathBuf::from("/tmp/x"));
    }
}
