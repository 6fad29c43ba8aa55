//! `actcd-tables watch-memory`: one row of etcd's watch-memory benchmark, measured from this
//! separate process (`measure` runs them all, a fresh server per row), and `--table`, which
//! prints rows measured earlier in etcd's layout.
//!
//! A row dials `clients` connections (one HTTP/2 connection each), opens `streams per client`
//! Watch streams on each and creates `watches per stream` watches on each stream, on distinct
//! keys (`w/{conn}/{stream}/{i}`); a stream sends its next create when the previous one is
//! answered, as etcd's clientv3 does (and so etcd's own benchmark). Sending a stream's creates all
//! at once instead measures HTTP/2's buffers as much as the watches: the frames queue in the
//! server's h2 connection, whose buffer slabs keep their peak size (~50 B more per watch here). Then it waits `--settle`, reads the server's VmRSS from
//! `/proc/PID/status`, and closes everything. The server's RSS only means something on a fresh
//! server, so a run takes exactly one row; `measure` starts a fresh server per row.
//!
//! Before it connects, a row is checked against the machine: file descriptors (one per
//! connection on each side), memory (server and client, estimated from the rows measured so far,
//! given as RESULTS, or from high default coefficients) and setup time. A row that does not fit
//! is recorded as skipped, with the reason, and not run (`--force` runs it anyway).
//!
//! `--table` prints the RESULTS in etcd's layout with the least-squares fit of c1, c2 and c3.

use crate::memtable::{self, Limits, Machine, Models, Row, RowResult, Verdict};
use crate::outcome::Outcome;
use actcd_bench::conn::dial;
use actcd_bench::conn::Conn;
use actcd_bench::format as units;
use actcd_bench::output::Out;
use actcd_bench::progress::Progress;
use actcd_bench::report::Recorder;
use actcd_bench::runner::watchdog;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_bench::watch_streams::{open_stream, OpenStream, StreamPlan};
use actcd_proto::go_duration::parse as parse_go_duration;
use actcd_test_support::procfs::{self, Proc};
use bytes::Bytes;
use clap::{ArgAction, Args};
use futures::StreamExt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections dialed at once (a burst of thousands overflows the server's accept backlog).
const DIAL_BATCH: usize = 100;

/// `watch-memory`'s flags.
#[derive(Debug, Clone, Args)]
pub struct WatchMemoryArgs {
    /// The server's process id: its VmRSS is read from /proc/PID/status.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's name in the results (default: the process name of --server-pid).
    #[arg(long)]
    pub server: Option<String>,
    /// Rows: all (etcd's 15), quick (11 of them, up to 5M watches), small (6, up to 500k
    /// watches), big (etcd's rows not in quick), or a list like
    /// 1kx10x1,2kx50x100 (clients x streams per client x watches per stream). A run takes one.
    #[arg(long, default_value = "quick")]
    pub rows: String,
    /// Print RESULTS as etcd's table, one per server, with the fitted c1, c2, c3.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub table: bool,
    /// Run the row even when the estimate says it does not fit.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub force: bool,
    /// Wait after the last created response before reading the server's RSS.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub settle: Duration,
    /// Streams being opened at once.
    #[arg(long, default_value_t = 256)]
    pub open_concurrency: usize,
    /// Memory (MiB) the estimate keeps free for the rest of the machine.
    #[arg(long, default_value_t = 2048)]
    pub reserve_mib: u64,
    /// Longest estimated setup a row may take.
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub row_time_limit: Duration,
    /// Estimates are multiplied by this before they are compared with the machine.
    #[arg(long, default_value_t = 1.25)]
    pub margin: f64,
    /// Results of rows measured earlier (JSON documents of watch-memory --json): the table's
    /// rows (--table), or what a run's estimate is fitted from.
    pub results: Vec<PathBuf>,
}

impl WatchMemoryArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
        let rows = memtable::parse_rows(&a.rows)?;
        if !a.table && rows.len() != 1 {
            return Err(format!(
                "--rows {} has {} rows; a run measures one row on a fresh server (measure --only watch runs them all)",
                a.rows,
                rows.len()
            ));
        }
        if a.open_concurrency == 0 {
            return Err("--open-concurrency must be at least 1".to_string());
        }
        if a.margin.is_nan() || a.margin < 1.0 {
            return Err(format!("--margin must be at least 1, got {}", a.margin));
        }
        Ok(())
    }

    /// Whether the flags ask for an offline mode (no connection, no report).
    pub fn offline(&self) -> bool {
        self.table
    }

    /// Runs an offline mode; returns the exit code.
    pub fn run_offline(&self) -> i32 {
        let a = self;
        // Lines on stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
        let mut stdout = std::io::stdout().lock();
        macro_rules! say {
            ($($t:tt)*) => {
                if writeln!(stdout, $($t)*).is_err() {
                    return 0;
                }
            };
        }
        let (results, problems) = memtable::load_results(&a.results);
        for p in &problems {
            eprintln!("warning: {p}");
        }
        if results.is_empty() {
            eprintln!(
                "actcd-tables watch-memory --table: no watch-memory results among the {} files given",
                a.results.len()
            );
            return 1;
        }
        let mut servers: Vec<String> = Vec::new();
        for r in &results {
            if !servers.contains(&r.outcome.server) {
                servers.push(r.outcome.server.clone());
            }
        }
        for (i, s) in servers.iter().enumerate() {
            if i > 0 {
                say!("");
            }
            say!("{}", memtable::table(s, &results));
        }
        if let [a_name, b_name] = servers.as_slice() {
            // Two servers: side by side, the one named actcd second (the ratio is it over the other).
            let (base, other) = if a_name == "actcd" { (b_name, a_name) } else { (a_name, b_name) };
            say!("\n{}", memtable::side_by_side(base, other, &results));
        }
        0
    }

    /// Runs one row (or records it as skipped).
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(&row) = memtable::parse_rows(&a.rows).ok().as_ref().and_then(|r| r.first()) else {
            return;
        };
        let server = server_name(&a);
        if !a.force {
            let (models, problems) = models(&a);
            for p in problems {
                out.note(format!("warning: {p}"));
            }
            if let Verdict::Skip(why) = memtable::plan(&row, &machine(a.server_pid), &limits(&a), &models) {
                out.note(format!("watch-memory {}: skipped: {why}", row.spec()));
                finish(out, RowResult::skipped(row, server, why));
                return;
            }
        }
        let Some(pid) = a.server_pid else {
            stop.stop(
                "--server-pid is needed to measure a row (the server's RSS is read from /proc/PID/status)",
            );
            return;
        };
        let opts = RowOptions {
            settle: a.settle,
            open_concurrency: a.open_concurrency,
            time_limit: a.row_time_limit,
        };
        // Bounded in time: the stall watchdog ends a frozen row, this limit a slow one.
        let limit = deadline(stop, opts.time_limit + opts.settle);
        let result = measure(settings, stop, out, &opts, row, pid, server).await;
        limit.abort();
        finish(out, result);
    }
}

/// What the machine offers a row: memory available, this process's and the server's open-file
/// limits.
pub fn machine(server_pid: Option<u32>) -> Machine {
    let client_fds = procfs::open_file_limit(Proc::Me).unwrap_or(u64::MAX);
    Machine {
        mem_available: procfs::mem_available().unwrap_or(0),
        client_fds,
        server_fds: server_pid.and_then(|p| procfs::open_file_limit(Proc::Pid(p))).unwrap_or(client_fds),
    }
}

/// `--server`, else the process name of `--server-pid`, else empty.
fn server_name(a: &WatchMemoryArgs) -> String {
    a.server.clone().or_else(|| a.server_pid.map(|p| procfs::name(Proc::Pid(p)))).unwrap_or_default()
}

fn limits(a: &WatchMemoryArgs) -> Limits {
    Limits {
        reserve: a.reserve_mib << 20,
        max_secs: a.row_time_limit.as_secs_f64(),
        margin: a.margin,
        budget: u64::MAX,
    }
}

fn models(a: &WatchMemoryArgs) -> (Models, Vec<String>) {
    let (results, problems) = memtable::load_results(&a.results);
    // Only rows measured on the same kind of server as the one asked about estimate it.
    let server = server_name(a);
    let same: Vec<RowResult> = results
        .into_iter()
        .filter(|r| server.is_empty() || r.outcome.server.is_empty() || r.outcome.server == server)
        .collect();
    (memtable::models_from(&same), problems)
}

/// How a row is measured.
#[derive(Debug, Clone, Copy)]
pub struct RowOptions {
    /// Wait after the last created response before reading the server's RSS.
    pub settle: Duration,
    /// Streams being opened at once.
    pub open_concurrency: usize,
    /// Longest the setup may take (the row is stopped then, and reported as incomplete).
    pub time_limit: Duration,
}

fn finish(out: &Out, r: RowResult) {
    if !out.json() {
        let mut s = format!(
            "\nWatch memory, {} clients x {} streams x {} watches ({} streams, {} watches) on {}:\n",
            r.row.clients,
            r.row.streams_per_client,
            r.row.watches_per_stream,
            r.row.streams(),
            r.row.watches(),
            if r.outcome.server.is_empty() { "the server" } else { &r.outcome.server }
        );
        if let Some(why) = &r.outcome.skipped {
            s += &format!("  Skipped:\t{why}\n");
        } else {
            let delta = r.outcome.delta_bytes();
            s += &format!(
                "  Opened:\t{} conns, {} streams, {} watches created in {:.2} secs.\n",
                r.conns_opened, r.streams_opened, r.watches_created, r.setup_secs
            );
            s += &format!(
                "  Server RSS:\t{} (idle {}, +{}; peak {}).\n",
                units::mb(r.outcome.rss_bytes()),
                units::mb(r.outcome.idle_bytes()),
                units::mb(delta),
                units::mb(r.outcome.server_hwm_kb as f64 * 1024.0)
            );
            s += &format!(
                "  Per client:\t{} (all-in over idle).\n",
                units::per_item(delta / r.row.clients.max(1) as f64)
            );
            s += &format!(
                "  Client RSS:\t{} (idle {}).\n",
                units::mb(r.client_rss_kb as f64 * 1024.0),
                units::mb(r.client_rss_idle_kb as f64 * 1024.0)
            );
            if let Some(why) = &r.outcome.failed {
                s += &format!("  Incomplete:\t{why}\n");
            }
        }
        out.print(&s);
    }
    match serde_json::to_value(&r) {
        Ok(v) => out.extra("row", v),
        Err(e) => out.note(format!("error: cannot encode the row: {e}")),
    }
}

/// Measures `row` against the server at `settings.endpoints` whose pid is `pid`.
pub async fn measure(
    settings: &Settings,
    stop: &Stop,
    out: &Out,
    a: &RowOptions,
    row: Row,
    pid: u32,
    server: String,
) -> RowResult {
    let mut r = RowResult::new(row, Outcome::start(server, pid));
    if let Some(why) = &r.outcome.failed {
        stop.stop(why.clone());
        return r;
    }
    r.client_rss_idle_kb = procfs::memory(Proc::Me).map(|m| m.rss_kb).unwrap_or(0);
    let start = Instant::now();

    let conns = row.clients as usize;
    let mut channels: Vec<Conn> = Vec::with_capacity(conns);
    while channels.len() < conns && !stop.is_stopped() {
        let n = DIAL_BATCH.min(conns - channels.len());
        match dial(settings, n).await {
            Ok(c) => channels.extend(c),
            Err(errors) => {
                let first = errors.first().cloned().unwrap_or_default();
                stop.stop(format!(
                    "{first} ({} of a batch of {n} connections failed after {} connected)",
                    errors.len(),
                    channels.len()
                ));
            }
        }
    }
    r.conns_opened = channels.len() as u64;

    let rec = Arc::new(Recorder::new("watch-create", settings.sample));
    let mut held: Vec<OpenStream> = Vec::new();
    if !stop.is_stopped() {
        let progress = {
            let rec = rec.clone();
            Progress::start(settings, row.watches(), move || rec.completed())
        };
        let opening = Arc::new(AtomicBool::new(true));
        let dog = {
            let (rec, opening) = (rec.clone(), opening.clone());
            watchdog(stop.clone(), settings.stall_timeout, "watch creation", move || {
                (rec.completed(), opening.load(Ordering::Relaxed))
            })
        };
        let per_conn = row.streams_per_client as usize;
        let plan = StreamPlan { prev_kv: false, timeout: settings.request_timeout };
        // Stream i is stream i / conns of connection i mod conns: the load spreads over
        // connections from the start.
        let mut streams = futures::stream::iter(0..conns * per_conn)
            .map(|i| {
                let (conn, stream) = (i % conns, i / conns);
                let (channel, rec, stop) = (channels[conn].clone(), rec.clone(), stop.clone());
                let keys: Vec<Bytes> = (0..row.watches_per_stream)
                    .map(|w| Bytes::from(format!("w/{conn}/{stream}/{w}")))
                    .collect();
                async move { open_stream(i, channel, keys, &plan, &rec, &stop).await }
            })
            .buffer_unordered(a.open_concurrency);
        loop {
            tokio::select! {
                next = streams.next() => match next {
                    Some(Some(h)) => held.push(h),
                    Some(None) => {}
                    None => break,
                },
                _ = stop.stopped() => break,
            }
        }
        drop(streams);
        opening.store(false, Ordering::Relaxed);
        dog.abort();
        progress.finish(rec.completed());
    }
    r.setup_secs = start.elapsed().as_secs_f64();
    r.streams_opened = held.len() as u64;
    r.watches_created = rec.succeeded();
    out.report("Watch creation summary:\n", rec.stats(start.elapsed()), "");
    if let Some(why) = stop.reason() {
        r.outcome.fail(why);
    } else if r.watches_created < row.watches() {
        r.outcome.fail(format!(
            "{} watches not created (see the error distribution)",
            row.watches() - r.watches_created
        ));
    }
    // The RSS is read after the settle time even when the row stopped short (it tells how far
    // it got), but not after Ctrl-C.
    if !stop.reason().is_some_and(|why| why.contains("Ctrl-C")) {
        tokio::time::sleep(a.settle).await;
    }
    r.outcome.finish(pid);
    if r.outcome.server_rss_kb == 0 {
        stop.stop(r.outcome.failed.clone().unwrap_or_default());
    }
    r.client_rss_kb = procfs::memory(Proc::Me).map(|m| m.rss_kb).unwrap_or(0);
    // Close everything: streams first, then the connections.
    drop(held);
    drop(channels);
    r
}

/// Stops `stop` with a reason after `limit`.
pub fn deadline(stop: &Stop, limit: Duration) -> tokio::task::JoinHandle<()> {
    let stop = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(limit).await;
        stop.stop(format!("the row ran over the {limit:?} row time limit"));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        global: actcd_bench::settings::Global,
        #[command(flatten)]
        row: WatchMemoryArgs,
    }

    fn args(argv: &[&str]) -> WatchMemoryArgs {
        let mut full = vec!["watch-memory"];
        full.extend_from_slice(argv);
        Line::try_parse_from(full).expect("parses").row
    }

    #[test]
    fn a_run_takes_one_row() {
        assert!(args(&["--rows=1kx1x1", "--server-pid=1"]).validate().is_ok());
        let e = args(&["--rows=quick", "--server-pid=1"]).validate().expect_err("many rows");
        assert!(e.contains("one row"), "{e}");
        assert!(args(&["--rows=all", "--table", "a.json"]).validate().is_ok());
        assert!(args(&["--rows=1x1"]).validate().is_err());
        assert!(args(&["--rows=1x1x1", "--margin=0.5"]).validate().is_err());
        assert!(args(&["--rows=1x1x1", "--open-concurrency=0"]).validate().is_err());
        let a = args(&["--table", "x.json", "y.json"]);
        assert!(a.offline());
        assert_eq!(a.results.len(), 2);
    }

    /// Runs one row against `addr` as `actcd-tables --json watch-memory ARGS` would.
    async fn run_row(addr: std::net::SocketAddr, argv: &[&str]) -> (Stop, Out) {
        let endpoints = format!("--endpoints={addr}");
        let mut full = vec!["watch-memory", "--json", "--stall-timeout=1s", &endpoints];
        full.extend_from_slice(argv);
        let line = Line::try_parse_from(full).expect("parses");
        let settings = line.global.settings().expect("valid");
        let (stop, out) = (Stop::new(), Out::new("watch-memory", &settings));
        let run = line.row.run(&settings, &stop, &out);
        tokio::time::timeout(Duration::from_secs(20), run).await.expect("the row ends");
        (stop, out)
    }

    #[tokio::test]
    async fn rows_against_a_server_without_watch_end_with_a_clear_reason() {
        let (_tx, rx) = tokio::sync::oneshot::channel();
        let addr = actcd_test_support::kv_only::serve(rx).await;
        // watch-memory reads "the server's" memory from this process here.
        let pid = format!("--server-pid={}", std::process::id());
        let (stop, out) = run_row(addr, &["--rows=3x2x4", &pid, "--settle=0s"]).await;
        let reason = stop.reason().unwrap_or_default();
        assert!(reason.contains("Watch") && reason.contains("Unimplemented"), "{reason}");
        let doc = out.document();
        let row = doc.extra.get("row").expect("the row is recorded");
        assert_eq!(row["conns_opened"], 3);
        assert_eq!(row["watches_created"], 0);
        assert!(row["failed"].as_str().unwrap_or_default().contains("Unimplemented"), "{row}");
        assert!(row["server_rss_kb"].as_u64().unwrap_or(0) > 0);
        assert!(doc.reports[0].errors > 0 && doc.reports[0].requests == 0);

        // A row the machine cannot hold is recorded as skipped, without connecting.
        let (stop, out) = run_row(addr, &["--rows=25kx50x1k", &pid]).await;
        assert!(stop.reason().is_none());
        let row = out.document().extra.get("row").cloned().expect("the row is recorded");
        assert!(row["skipped"].as_str().is_some_and(|why| why.starts_with("needs")), "{row}");
        assert_eq!(row["conns_opened"], 0);
    }
}
