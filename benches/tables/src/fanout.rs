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

use crate::measure::{out_dir, row_stop};
use crate::server::{default_binary, Spec};
use crate::stamp::Utc;
use actcd_bench::cmd::watch_fanout::{Shape, WatchFanoutArgs};
use actcd_bench::output::{Document, Out};
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_test_support::procfs::{self, Proc};
use actcd_test_support::server::Kind;
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

const RUNS: [&str; 2] = ["throughput", "latency"];
const SERVERS: [Kind; 2] = [Kind::Etcd, Kind::Actcd];

/// `fanout`'s flags.
#[derive(Debug, Clone, Args)]
pub struct FanoutArgs {
    /// actcd's binary (default: next to actcd-tables).
    #[arg(long)]
    pub actcd_bin: Option<PathBuf>,
    /// etcd's binary (default: etcd on PATH or /usr/bin/etcd).
    #[arg(long)]
    pub etcd_bin: Option<PathBuf>,
    /// Watchers, spread evenly over the keys (watcher g watches key g mod --keys).
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Watched keys; the puts go to them in turn.
    #[arg(long, default_value_t = 1)]
    pub keys: usize,
    /// Watch streams (one client each).
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    /// Connections the streams and putters spread over.
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Puts of the throughput run (no rate limit).
    #[arg(long, default_value_t = 5000)]
    pub puts: u64,
    /// Puts of the latency run.
    #[arg(long, default_value_t = 2000)]
    pub latency_puts: u64,
    /// Puts per second of the latency run.
    #[arg(long, default_value_t = 200)]
    pub latency_rate: u64,
    /// Concurrent putters.
    #[arg(long, default_value_t = 8)]
    pub put_clients: usize,
    /// Value size of the puts.
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
    /// Runs of each; the table shows the median (by events/s).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// A line about the binaries for the table's header (the scripts say when and from what
    /// they were built).
    #[arg(long, default_value = "")]
    pub build_info: String,
    /// Where the table and the JSON reports go (default $ACTCD_BENCH_RESULTS/<UTC date>, or
    /// ~/actcd-bench-results/<UTC date> when that is not set).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Parent of the temp dir that holds the started servers' data dirs and logs.
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
}

/// What one repeat of one run on one server measured.
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
        let watch = doc.reports.iter().find(|r| r.name == "watch");
        Self {
            events_per_sec: doc.extra.get("events_per_sec").and_then(|v| v.as_f64()),
            p50: watch.and_then(|s| s.percentile(50.0)),
            p99: watch.and_then(|s| s.percentile(99.0)),
            p999: watch.and_then(|s| s.percentile(99.9)),
            puts_per_sec: doc.reports.iter().find(|r| r.name == "put").map(|s| s.requests_per_sec),
            client_cores: doc.client_cpu.as_ref().map(|c| (c.cores_used * 100.0).round() / 100.0),
            errors: doc.reports.iter().map(|r| r.errors).sum(),
            ..Self::default()
        }
    }
}

impl FanoutArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.repeat == 0 || self.connections == 0 {
            return Err("--repeat and --connections must be at least 1".to_string());
        }
        self.load("throughput").validate()
    }

    /// The watch-fanout load of `run`.
    fn load(&self, run: &str) -> WatchFanoutArgs {
        let latency = run == "latency";
        WatchFanoutArgs {
            shape: Shape {
                watchers: self.watchers,
                keys: self.keys,
                streams: self.streams,
                puts: if latency { self.latency_puts } else { self.puts },
                put_clients: self.put_clients,
                val_size: self.val_size,
            },
            put_rate: if latency { self.latency_rate } else { 0 },
            key_size: 32,
        }
    }

    /// Runs every repeat and prints and writes the table.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let now = Utc::now();
        let dir = out_dir(self.out.as_deref(), &now);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            stop.stop(format!("cannot create {}: {e}", dir.display()));
            return;
        }
        let work = match tempfile::Builder::new().prefix("actcd-watch-fanout.").tempdir_in(&self.work_dir) {
            Ok(w) => w,
            Err(e) => {
                stop.stop(format!("cannot create a temp dir in {}: {e}", self.work_dir.display()));
                return;
            }
        };
        let mut specs = Vec::new();
        for kind in SERVERS {
            let binary = match kind {
                Kind::Actcd => self.actcd_bin.clone().map(Ok),
                Kind::Etcd => self.etcd_bin.clone().map(Ok),
            }
            .unwrap_or_else(|| default_binary(kind));
            let Some(binary) = stop.check(binary) else { return };
            specs.push(Spec { kind, binary, work: work.path().to_path_buf(), quota_bytes: 8 << 30 });
        }
        // figures[server][run][repeat]
        let mut figures = vec![vec![Vec::new(); RUNS.len()]; SERVERS.len()];
        for rep in 1..=self.repeat {
            for (s, spec) in specs.iter().enumerate() {
                for (r, run) in RUNS.iter().enumerate() {
                    if stop.is_stopped() {
                        return;
                    }
                    let name = format!("{}-{run}", spec.kind.name());
                    let f = match self.one(settings, stop, spec, run, &name).await {
                        Ok((f, doc)) => {
                            let path = dir.join(format!(
                                "{}-{}-watch-fanout-{run}-{rep}.json",
                                now.stamp,
                                spec.kind.name()
                            ));
                            match serde_json::to_string_pretty(&doc) {
                                Ok(json) => {
                                    if let Err(e) = std::fs::write(&path, json) {
                                        out.note(format!("warning: cannot write {}: {e}", path.display()));
                                    }
                                }
                                Err(e) => out.note(format!("warning: cannot encode the report: {e}")),
                            }
                            if let Some(why) = &doc.aborted {
                                eprintln!("watch-fanout: {} {run}: stopped early: {why}", spec.kind.name());
                            }
                            f
                        }
                        Err(e) => {
                            eprintln!("watch-fanout: {} {run}: {e}", spec.kind.name());
                            Figures::default()
                        }
                    };
                    eprintln!(
                        "watch-fanout: {rep}/{} {:<5} {run:<10} {:>9.0} events/s  p50 {:>6.2} ms  p99 {:>7.2} ms  server cpu {:>5.2} s  rss {:>6.1} MB",
                        self.repeat,
                        spec.kind.name(),
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
        let path = dir.join(format!("{}-watch-fanout.md", now.stamp));
        match std::fs::write(&path, &text) {
            Ok(()) => eprintln!(
                "raw JSON: {}/{}-*-watch-fanout-*.json; summary: {}",
                dir.display(),
                now.stamp,
                path.display()
            ),
            Err(e) => stop.stop(format!("cannot write {}: {e}", path.display())),
        }
    }

    /// One run on a fresh server: its figures and the load's report.
    async fn one(
        &self,
        base: &Settings,
        stop: &Stop,
        spec: &Spec,
        run: &str,
        name: &str,
    ) -> Result<(Figures, Document), String> {
        let server = spec.start(name, Duration::from_secs(15)).await?;
        let settings = Settings {
            endpoints: vec![server.endpoint.clone()],
            conns: self.connections,
            clients: self.streams,
            sample: false,
            json: true,
            ..base.clone()
        };
        let (row, forward) = row_stop(stop);
        let out = Out::new("watch-fanout", &settings);
        let cpu = server.cpu_time();
        self.load(run).run(&settings, &row, &out).await;
        forward.abort();
        let doc = out.complete(row.reason());
        let mut f = Figures::of(&doc);
        f.server_cpu_secs = server.cpu_time().saturating_sub(cpu).as_secs_f64();
        f.server_rss_kb = server.memory().map_or(0, |m| m.rss_kb);
        Ok((f, doc))
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
        let fmb = |kb: u64| format!("{:.1}", kb as f64 / 1024.0);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
            _ => "—".to_string(),
        };
        let open_files = procfs::open_file_limit(Proc::Me).map_or("unlimited".to_string(), |n| n.to_string());
        let mut s = String::new();
        let _ = writeln!(
            s,
            "watch fan-out, actcd vs etcd {etcd_version}; {}, {}, open files {open_files}; client and server share the machine",
            now.line,
            procfs::machine_line()
        );
        let _ = writeln!(s, "{}", self.build_info);
        let _ = writeln!(
            s,
            "{} watchers of {} key(s) over {} streams on {} connections; puts of {}-byte values from {} putters (throughput: {} puts, no rate limit; latency: {} puts at {}/s); latency = put send -> event arrival; fresh server per run; median of {} repeats (by events/s)",
            self.watchers, self.keys, self.streams, self.connections, self.val_size, self.put_clients, self.puts, self.latency_puts, self.latency_rate, self.repeat
        );
        s += "\n| run | etcd events/s | actcd events/s | events/s actcd/etcd | etcd p50 ms | actcd p50 ms | etcd p99 ms | actcd p99 ms | p99 actcd/etcd | etcd p99.9 ms | actcd p99.9 ms | etcd puts/s | actcd puts/s | etcd server CPU s | actcd server CPU s | etcd RSS MB | actcd RSS MB |\n";
        s += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for (r, run) in RUNS.iter().enumerate() {
            let (e, a) = (median(&figures[0][r]), median(&figures[1][r]));
            let _ = writeln!(
                s,
                "| {run} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} |",
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
                e.server_cpu_secs,
                a.server_cpu_secs,
                fmb(e.server_rss_kb),
                fmb(a.server_rss_kb)
            );
        }
        let every =
            |reps: &[Figures]| reps.iter().map(|f| format!("{} ", f0(f.events_per_sec))).collect::<String>();
        s += "\nevents/s of every repeat:";
        for (r, run) in RUNS.iter().enumerate() {
            let _ = write!(s, " {run}: etcd {}/ actcd {};", every(&figures[0][r]), every(&figures[1][r]));
        }
        s += "\nbench client CPU (cores busy, etcd / actcd):";
        let cores = |f: &Figures| f.client_cores.map_or("null".to_string(), |c| c.to_string());
        for (r, run) in RUNS.iter().enumerate() {
            let _ =
                write!(s, " {run} {} / {};", cores(&median(&figures[0][r])), cores(&median(&figures[1][r])));
        }
        s += "\n";
        let mut errors = String::new();
        for (r, run) in RUNS.iter().enumerate() {
            for (k, kind) in SERVERS.iter().enumerate() {
                let n = median(&figures[k][r]).errors;
                if n > 0 {
                    let _ = write!(errors, " {} {run}: {n};", kind.name());
                }
            }
        }
        if !errors.is_empty() {
            let _ = writeln!(s, "errors:{errors}");
        }
        s
    }
}
