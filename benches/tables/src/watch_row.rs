//! `actcd-tables watch-memory`: one row of etcd's watch-memory benchmark, measured from this
//! separate process (`measure` runs them all, a fresh server per row), and `--table`, which
//! prints rows measured earlier in etcd's layout with the least-squares fit of c1, c2 and c3.
//!
//! A row dials `clients` connections (one HTTP/2 connection each), opens `streams per client`
//! Watch streams on each and creates `watches per stream` watches on each stream, on distinct
//! keys (`w/{conn}/{stream}/{i}`); a stream sends its next create when the previous one is
//! answered, as etcd's clientv3 does (and so etcd's own benchmark). Sending a stream's creates
//! all at once instead measures HTTP/2's buffers as much as the watches: the frames queue in
//! the server's h2 connection, whose buffer slabs keep their peak size (~50 B more per watch
//! here). Then it waits `--settle`, reads the server's VmRSS from `/proc/PID/status`, and
//! closes everything. The server's RSS only means something on a fresh server, so a run takes
//! exactly one row.
//!
//! Before it connects, a row is checked against the machine: file descriptors (one per
//! connection on each side), memory (server and client, estimated from the rows measured so far,
//! given as RESULTS, or from high default coefficients) and setup time. A row that does not fit
//! is recorded as skipped, with the reason, and not run (`--force` runs it anyway).

use crate::memtable::{self, machine, Limits, Row, RowResult, Verdict};
use crate::outcome::{MemoryRow, Outcome};
use actcd_bench::conn::dial;
use actcd_bench::format::{mb, per_item};
use actcd_bench::output::Out;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_bench::watch_streams::open_streams;
use actcd_proto::go_duration::parse as parse_go_duration;
use actcd_test_support::procfs::{self, Proc};
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Connections dialed at once (a burst of thousands overflows the server's accept backlog).
const DIAL_BATCH: usize = 100;
const OPEN_CONCURRENCY: usize = 256;
/// Estimates are multiplied by this before they are compared with the machine.
const MARGIN: f64 = 1.25;

/// How a memory row is bounded and read, as `watch-memory` and `measure` take it.
#[derive(Debug, Clone, Args)]
pub struct RowLimits {
    /// Wait after a row's load (its last created response) before reading the server's RSS.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub settle: Duration,
    /// Memory (MiB) kept free for the rest of the machine.
    #[arg(long, default_value_t = 2048)]
    pub reserve_mib: u64,
    /// Longest estimated time a row may take; longer rows are skipped (and a row that runs over
    /// it is stopped).
    #[arg(long, default_value = "10m", value_parser = parse_go_duration)]
    pub row_time_limit: Duration,
}

impl RowLimits {
    /// The limits a row's plan applies, with at most `budget` bytes for server and client.
    pub fn plan(&self, budget: u64) -> Limits {
        Limits {
            reserve: self.reserve_mib << 20,
            max_secs: self.row_time_limit.as_secs_f64(),
            margin: MARGIN,
            budget,
        }
    }
}

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
    #[command(flatten)]
    pub limits: RowLimits,
    /// Results of rows measured earlier (JSON documents of watch-memory --json or measure): the
    /// table's rows (--table), or what a run's estimate is fitted from.
    pub results: Vec<PathBuf>,
}

impl WatchMemoryArgs {
    pub fn validate(&self) -> Result<(), String> {
        let rows = memtable::parse_rows(&self.rows)?.len();
        if !self.table && rows != 1 {
            return Err(format!(
                "--rows {} has {rows} rows; a run measures one row on a fresh server (measure --only watch runs them all)",
                self.rows
            ));
        }
        Ok(())
    }

    /// `--table`: the RESULTS as etcd's tables; the exit code.
    pub fn print_tables(&self) -> i32 {
        let (results, problems) = memtable::load_results(&self.results);
        problems.iter().for_each(|p| eprintln!("warning: {p}"));
        if results.is_empty() {
            let n = self.results.len();
            eprintln!("actcd-tables watch-memory --table: no watch-memory results among the {n} files given");
            return 1;
        }
        let mut servers: Vec<&str> = Vec::new();
        for r in &results {
            if !servers.contains(&r.outcome.server.as_str()) {
                servers.push(&r.outcome.server);
            }
        }
        let mut text: Vec<String> = servers.iter().map(|s| memtable::table(s, &results)).collect();
        if let [a, b] = servers[..] {
            // Two servers: side by side, the one named actcd second (the ratio is it over the other).
            let (base, other) = if a == "actcd" { (b, a) } else { (a, b) };
            text.push(memtable::side_by_side(base, other, &results));
        }
        // A closed pipe (`| head`) ends the output quietly instead of panicking.
        let _ = writeln!(std::io::stdout().lock(), "{}", text.join("\n\n"));
        0
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(&row) = memtable::parse_rows(&a.rows).ok().as_ref().and_then(|r| r.first()) else { return };
        let server =
            a.server.clone().or_else(|| a.server_pid.map(|p| procfs::name(Proc::Pid(p)))).unwrap_or_default();
        if !a.force {
            let (results, problems) = memtable::load_results(&a.results);
            problems.into_iter().for_each(|p| out.note(format!("warning: {p}")));
            // Only rows measured on the same kind of server as the one asked about estimate it.
            let same: Vec<RowResult> = results
                .into_iter()
                .filter(|r| server.is_empty() || r.outcome.server.is_empty() || r.outcome.server == server)
                .collect();
            let (limits, models) = (a.limits.plan(u64::MAX), memtable::models_from(&same));
            if let Verdict::Skip(why) = memtable::plan(&row, &machine(a.server_pid), &limits, &models) {
                out.note(format!("watch-memory {}: skipped: {why}", row.spec()));
                return finish(out, RowResult::new(row, Outcome::skipped(server, why)));
            }
        }
        let Some(pid) = a.server_pid else {
            return stop.stop(
                "--server-pid is needed to measure a row (the server's RSS is read from /proc/PID/status)",
            );
        };
        // Bounded in time: the stall watchdog ends a frozen row, this limit a slow one.
        let limit = stop.after(a.limits.row_time_limit + a.limits.settle);
        let result = measure(settings, stop, out, &a.limits, row, pid, server).await;
        limit.abort();
        finish(out, result);
    }
}

fn finish(out: &Out, r: RowResult) {
    let row = &r.row;
    let server = if r.outcome.server.is_empty() { "the server" } else { &r.outcome.server };
    let mut s = format!(
        "\nWatch memory, {} clients x {} streams x {} watches ({} streams, {} watches) on {server}:\n",
        row.clients,
        row.streams_per_client,
        row.watches_per_stream,
        row.streams(),
        row.watches()
    );
    let o = &r.outcome;
    if let Some(why) = &o.skipped {
        s += &format!("  Skipped:\t{why}\n");
    } else {
        let kb = |kb: u64| mb(kb as f64 * 1024.0);
        s += &format!(
            "  Opened:\t{} conns, {} streams, {} watches created in {:.2} secs.\n",
            r.conns_opened, r.streams_opened, r.watches_created, r.setup_secs
        );
        s += &format!(
            "  Server RSS:\t{} (idle {}, +{}; peak {}).\n",
            mb(o.rss_bytes()),
            mb(o.idle_bytes()),
            mb(o.delta_bytes()),
            kb(o.server_hwm_kb)
        );
        s += &format!(
            "  Per client:\t{} (all-in over idle).\n",
            per_item(o.delta_bytes() / row.clients.max(1) as f64)
        );
        s += &format!("  Client RSS:\t{} (idle {}).\n", kb(r.client_rss_kb), kb(r.client_rss_idle_kb));
        if let Some(why) = &o.failed {
            s += &format!("  Incomplete:\t{why}\n");
        }
    }
    out.print(&s);
    out.extra("row", &r);
}

/// Measures `row` against the server at `settings.endpoints` whose pid is `pid`.
pub async fn measure(
    settings: &Settings,
    stop: &Stop,
    out: &Out,
    limits: &RowLimits,
    row: Row,
    pid: u32,
    server: String,
) -> RowResult {
    let mut r = RowResult::new(row, Outcome::start(server, pid));
    if let Some(why) = &r.outcome.failed {
        stop.stop(why.clone());
        return r;
    }
    let client_rss = || procfs::memory(Proc::Me).map_or(0, |m| m.rss_kb);
    r.client_rss_idle_kb = client_rss();
    let start = Instant::now();

    let conns = row.clients as usize;
    let mut channels = Vec::with_capacity(conns);
    while channels.len() < conns && !stop.is_stopped() {
        let n = DIAL_BATCH.min(conns - channels.len());
        match dial(settings, n).await {
            Ok(c) => channels.extend(c),
            Err(errors) => stop.stop(format!(
                "{} ({} of a batch of {n} connections failed after {} connected)",
                errors[0],
                errors.len(),
                channels.len()
            )),
        }
    }
    r.conns_opened = channels.len() as u64;

    // Stream i is stream i / conns of connection i mod conns: the load spreads over connections
    // from the start.
    let keys_of = |i: usize| {
        let (conn, stream) = (i % conns, i / conns);
        (0..row.watches_per_stream).map(|w| Bytes::from(format!("w/{conn}/{stream}/{w}"))).collect()
    };
    let streams = if stop.is_stopped() { 0 } else { conns * row.streams_per_client as usize };
    let opening = (streams, row.watches(), OPEN_CONCURRENCY);
    let settings = Settings { clients: conns.max(1), ..settings.clone() };
    let (held, created) =
        open_streams((&settings, stop, out), &channels, opening, keys_of, (false, true)).await;
    r.setup_secs = start.elapsed().as_secs_f64();
    (r.streams_opened, r.watches_created) = (held.len() as u64, created);
    if let Some(why) = stop.reason() {
        r.outcome.fail(why);
    } else if r.watches_created < row.watches() {
        let missing = row.watches() - r.watches_created;
        r.outcome.fail(format!("{missing} watches not created (see the error distribution)"));
    }
    // The RSS is read after the settle time even when the row stopped short (it tells how far
    // it got), but not after Ctrl-C.
    if !stop.reason().is_some_and(|why| why.contains("Ctrl-C")) {
        tokio::time::sleep(limits.settle).await;
    }
    r.outcome.finish(pid);
    if r.outcome.server_rss_kb == 0 {
        stop.stop(r.outcome.failed.clone().unwrap_or_default());
    }
    r.client_rss_kb = client_rss();
    // Close everything: streams first, then the connections.
    drop(held);
    drop(channels);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_bench::execute::parse_flags;
    use actcd_bench::settings::Global;

    fn args(argv: &[&str]) -> WatchMemoryArgs {
        parse_flags(argv).expect("parses")
    }

    #[test]
    fn a_run_takes_one_row() {
        assert!(args(&["--rows=1kx1x1", "--server-pid=1"]).validate().is_ok());
        let e = args(&["--rows=quick", "--server-pid=1"]).validate().expect_err("many rows");
        assert!(e.contains("one row"), "{e}");
        assert!(args(&["--rows=all", "--table", "a.json"]).validate().is_ok());
        assert!(args(&["--rows=1x1"]).validate().is_err());
        let a = args(&["--table", "x.json", "y.json"]);
        assert!(a.table && a.results.len() == 2);
    }

    /// Runs one row against `addr` as `actcd-tables --json watch-memory ARGS` would.
    async fn run_row(addr: std::net::SocketAddr, argv: &[&str]) -> (Stop, Out) {
        let endpoints = format!("--endpoints={addr}");
        let global: Global = parse_flags(&["--json", "--stall-timeout=1s", &endpoints]).expect("parses");
        let settings = global.settings().expect("valid");
        let (stop, out) = (Stop::new(), Out::new("watch-memory", &settings));
        let run = args(argv).run(&settings, &stop, &out);
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
        assert_eq!((row["conns_opened"].as_u64(), row["watches_created"].as_u64()), (Some(3), Some(0)));
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
