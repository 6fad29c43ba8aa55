//! `actcd-tables fanout`: watch fan-out, actcd against etcd side by side. `--watchers` watchers
//! of `--keys` keys (one by default) over `--streams` streams on `--connections` connections,
//! puts to those keys in turn, events delivered per second and put-to-event latency
//! (`actcd-bench watch-fanout`'s load).
//!
//! Two runs per server, each on a fresh server on loopback with a temp data dir: throughput
//! (`--puts` puts from `--put-clients` putters, no rate limit) and latency (`--latency-puts`
//! puts at `--latency-rate` a second). Each runs `--repeat` times with the servers interleaved
//! (etcd, actcd, etcd, ...) so that noise from anything else on the machine falls on both; the
//! table shows the repeat with the median events/s of each server and run, with the ratios
//! actcd / etcd, every repeat's events/s, the client's CPU and the errors. Each repeat's report
//! is kept as JSON beside the table.

use crate::results::{write_all, Files, Utc};
use crate::server::{settings_for, work_dir, Spec};
use actcd_bench::cmd::watch_fanout::{Shape, WatchFanoutArgs};
use actcd_bench::format::table_head;
use actcd_bench::output::{Document, Out};
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_test_support::procfs::{self, Proc};
use actcd_test_support::server::Kind;
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;

const RUNS: [&str; 2] = ["throughput", "latency"];
const SERVERS: [Kind; 2] = [Kind::Etcd, Kind::Actcd];

#[derive(Debug, Clone, Args)]
pub struct FanoutArgs {
    /// actcd's binary (default: next to actcd-tables).
    #[arg(long)]
    pub actcd_bin: Option<PathBuf>,
    /// etcd's binary (default: etcd on PATH or /usr/bin/etcd).
    #[arg(long)]
    pub etcd_bin: Option<PathBuf>,
    /// The throughput run's shape (its puts go without a rate limit).
    #[command(flatten)]
    pub shape: Shape,
    /// Connections the streams and putters spread over.
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Puts of the latency run.
    #[arg(long, default_value_t = 2000)]
    pub latency_puts: u64,
    /// Puts per second of the latency run.
    #[arg(long, default_value_t = 200)]
    pub latency_rate: u64,
    /// Runs of each; the table shows the median (by events/s).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// A line about the binaries for the table's header (the scripts say when and from what
    /// they were built).
    #[arg(long, default_value = "")]
    pub build_info: String,
    #[command(flatten)]
    pub files: Files,
    /// Parent of the temp dir that holds the started servers' data dirs and logs.
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
}

/// What one repeat of one run on one server measured (latencies in seconds).
#[derive(Debug, Clone, Default)]
struct Figures {
    events_per_sec: Option<f64>,
    p50: Option<f64>,
    p99: Option<f64>,
    p999: Option<f64>,
    puts_per_sec: Option<f64>,
    server_cpu_secs: f64,
    server_rss_kb: u64,
    client_cores: Option<f64>,
    errors: u64,
}

impl Figures {
    fn of(doc: &Document) -> Self {
        let report = |name: &str| doc.reports.iter().find(|r| r.name == name);
        let watch = |p: f64| report("watch").and_then(|s| s.percentile(p));
        Self {
            events_per_sec: doc.extra.get("events_per_sec").and_then(|v| v.as_f64()),
            p50: watch(50.0),
            p99: watch(99.0),
            p999: watch(99.9),
            puts_per_sec: report("put").map(|s| s.requests_per_sec),
            client_cores: doc.client_cpu.as_ref().map(|c| (c.cores_used * 100.0).round() / 100.0),
            errors: doc.reports.iter().map(|r| r.errors).sum(),
            ..Self::default()
        }
    }
}

impl FanoutArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.repeat == 0 || self.connections == 0 {
            return Err("--repeat and --connections must be at least 1".to_string());
        }
        self.load("throughput").validate()
    }

    fn load(&self, run: &str) -> WatchFanoutArgs {
        let latency = run == "latency";
        let puts = if latency { self.latency_puts } else { self.shape.puts };
        let put_rate = if latency { self.latency_rate } else { 0 };
        WatchFanoutArgs { shape: Shape { puts, ..self.shape.clone() }, put_rate, key_size: 32 }
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let now = Utc::now();
        let dir = self.files.dir(&now);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return stop.stop(format!("cannot create {}: {e}", dir.display()));
        }
        let Some(work) = stop.check(work_dir(&self.work_dir)) else { return };
        let bin = |kind| if kind == Kind::Actcd { self.actcd_bin.clone() } else { self.etcd_bin.clone() };
        let specs: Result<Vec<Spec>, String> =
            SERVERS.iter().map(|&kind| Spec::new(kind, bin(kind), work.path(), 8 << 30)).collect();
        let Some(specs) = stop.check(specs) else { return };
        // figures[server][run][repeat]
        let mut figures = vec![vec![Vec::new(); RUNS.len()]; SERVERS.len()];
        for rep in 1..=self.repeat {
            for (s, spec) in specs.iter().enumerate() {
                for (r, run) in RUNS.iter().enumerate() {
                    if stop.is_stopped() {
                        return;
                    }
                    let kind = spec.kind.name();
                    let load = async |server: &mut actcd_test_support::server::Server, stop: &Stop| {
                        let settings = settings_for(settings, server, self.connections, self.shape.streams);
                        let out = Out::new("watch-fanout", &settings);
                        let cpu = server.cpu_time();
                        self.load(run).run(&settings, stop, &out).await;
                        let doc = out.complete(stop.reason());
                        let mut f = Figures::of(&doc);
                        f.server_cpu_secs = server.cpu_time().saturating_sub(cpu).as_secs_f64();
                        f.server_rss_kb = server.memory().map_or(0, |m| m.rss_kb);
                        (f, doc)
                    };
                    let f = match spec.on_fresh(&format!("{kind}-{run}"), stop, None, load).await {
                        Ok((f, doc)) => {
                            let name = format!("{kind}-watch-fanout-{run}-{rep}.json");
                            let json = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string());
                            if let Err(e) = json.and_then(|j| write_all(&dir, &now.stamp, &[(name, j)])) {
                                out.note(format!("warning: {e}"));
                            }
                            if let Some(why) = &doc.aborted {
                                eprintln!("watch-fanout: {kind} {run}: stopped early: {why}");
                            }
                            f
                        }
                        Err(e) => {
                            eprintln!("watch-fanout: {kind} {run}: {e}");
                            Figures::default()
                        }
                    };
                    eprintln!(
                        "watch-fanout: {rep}/{} {kind:<5} {run:<10} {:>9.0} events/s  p50 {:>6.2} ms  p99 {:>7.2} ms  server cpu {:>5.2} s  rss {:>6.1} MB",
                        self.repeat,
                        f.events_per_sec.unwrap_or(0.0),
                        f.p50.unwrap_or(0.0) * 1e3,
                        f.p99.unwrap_or(0.0) * 1e3,
                        f.server_cpu_secs,
                        f.server_rss_kb as f64 / 1024.0
                    );
                    figures[s][r].push(f);
                }
            }
        }
        let etcd_version = specs[0].version().split_whitespace().nth(2).unwrap_or_default().to_string();
        let text = self.table(&now, &etcd_version, &figures);
        out.print(&text);
        match write_all(&dir, &now.stamp, &[("watch-fanout.md".to_string(), text.into_bytes())]) {
            Ok(paths) => {
                eprintln!(
                    "raw JSON: {}/{}-*-watch-fanout-*.json; summary: {}",
                    dir.display(),
                    now.stamp,
                    paths[0].display()
                )
            }
            Err(e) => stop.stop(e),
        }
    }

    /// The summary: header, the median repeats side by side with the ratios, every repeat's
    /// events/s, the client's CPU and the errors.
    fn table(&self, now: &Utc, etcd_version: &str, figures: &[Vec<Vec<Figures>>]) -> String {
        let median = |reps: &[Figures]| -> Figures {
            let mut order: Vec<&Figures> = reps.iter().collect();
            order.sort_by(|a, b| a.events_per_sec.unwrap_or(0.0).total_cmp(&b.events_per_sec.unwrap_or(0.0)));
            // The middle one; of an even count, the lower of the two.
            order
                .get(order.len().div_ceil(2).saturating_sub(1))
                .map_or_else(Figures::default, |f| (*f).clone())
        };
        let f0 = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
        let fms = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{:.2}", v * 1e3));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
            _ => "—".to_string(),
        };
        let open_files = procfs::open_file_limit(Proc::Me).map_or("unlimited".to_string(), |n| n.to_string());
        let mut s = format!(
            "watch fan-out, actcd vs etcd {etcd_version}; {}, {}, open files {open_files}; client and server share the machine\n{}\n",
            now.line,
            procfs::machine_line(),
            self.build_info
        );
        let a = &self.shape;
        let _ = writeln!(
            s,
            "{} watchers of {} key(s) over {} streams on {} connections; puts of {}-byte values from {} putters (throughput: {} puts, no rate limit; latency: {} puts at {}/s); latency = put send -> event arrival; fresh server per run; median of {} repeats (by events/s)",
            a.watchers, a.keys, a.streams, self.connections, a.val_size, a.put_clients, a.puts, self.latency_puts, self.latency_rate, self.repeat
        );
        s += "\n";
        s += &table_head("run | etcd events/s | actcd events/s | events/s actcd/etcd | etcd p50 ms | actcd p50 ms | etcd p99 ms | actcd p99 ms | p99 actcd/etcd | etcd p99.9 ms | actcd p99.9 ms | etcd puts/s | actcd puts/s | etcd server CPU s | actcd server CPU s | etcd RSS MB | actcd RSS MB");
        let (mut every, mut cores, mut errors) = (String::new(), String::new(), String::new());
        for (r, run) in RUNS.iter().enumerate() {
            let (e, a) = (median(&figures[0][r]), median(&figures[1][r]));
            let cells = [
                f0(e.events_per_sec),
                f0(a.events_per_sec),
                ratio(a.events_per_sec, e.events_per_sec),
                fms(e.p50),
                fms(a.p50),
                fms(e.p99),
                fms(a.p99),
                ratio(a.p99, e.p99),
                fms(e.p999),
                fms(a.p999),
                f0(e.puts_per_sec),
                f0(a.puts_per_sec),
                format!("{:.2}", e.server_cpu_secs),
                format!("{:.2}", a.server_cpu_secs),
                format!("{:.1}", e.server_rss_kb as f64 / 1024.0),
                format!("{:.1}", a.server_rss_kb as f64 / 1024.0),
            ];
            let _ = writeln!(s, "| {run} | {} |", cells.join(" | "));
            let reps = |k: usize| {
                figures[k][r].iter().map(|f| format!("{} ", f0(f.events_per_sec))).collect::<String>()
            };
            let _ = write!(every, " {run}: etcd {}/ actcd {};", reps(0), reps(1));
            let core = |f: &Figures| f.client_cores.map_or("null".to_string(), |c| c.to_string());
            let _ = write!(cores, " {run} {} / {};", core(&e), core(&a));
            for (kind, n) in
                [(SERVERS[0], e.errors), (SERVERS[1], a.errors)].into_iter().filter(|(_, n)| *n > 0)
            {
                let _ = write!(errors, " {} {run}: {n};", kind.name());
            }
        }
        let _ = writeln!(
            s,
            "\nevents/s of every repeat:{every}\nbench client CPU (cores busy, etcd / actcd):{cores}"
        );
        if !errors.is_empty() {
            let _ = writeln!(s, "errors:{errors}");
        }
        s
    }
}
