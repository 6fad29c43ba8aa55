//! `actcd-tables measure`: etcd's published benchmark tables reproduced by one command, from
//! this separate process: the storage-memory table (server RSS after N keys × versions), the
//! watch-memory table (server RSS with clients × streams × watches, and the fitted c1, c2, c3)
//! and the put/range QPS table of etcd's performance doc. Printed in etcd's layout, and written
//! as JSON, markdown and PNG charts into `--out`.
//!
//! A memory row only means something on a fresh server, so the command starts the server
//! itself on loopback, on a fresh data dir, for every memory row (and once for the QPS runs),
//! and stops it by its pid afterwards. A row too large for the machine (memory over the budget
//! or what is free, backend over the quota, an estimated time over the row limit) is reported
//! as skipped with the reason, never dropped.

use crate::memtable::{self, Limits, Row, RowResult, Verdict};
use crate::outcome::{MemoryRow, Outcome};
use crate::qpstable;
use crate::results::{Files, Utc};
use crate::server::{died, settings_for, work_dir, Spec};
use crate::storetable::{self, StoreResult, StoreRow};
use crate::tablesdoc::{self, TablesDoc};
use crate::watch_row::{self, RowLimits};
use actcd_bench::format::mb;
use actcd_bench::output::Out;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_test_support::procfs;
use actcd_test_support::server::{Kind, Server};
use clap::{value_parser, ArgAction, Args, ValueEnum};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `--quick` watch rows: conns, streams and watches each varied on their own (enough for the
/// fit of c1, c2, c3), a few seconds in all.
const QUICK_WATCH_ROWS: &str = "100x1x1,200x1x1,100x10x1,100x10x10";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Table {
    Storage,
    Watch,
    Qps,
}

#[derive(Debug, Clone, Args)]
pub struct MeasureArgs {
    /// The server to start on loopback (actcd or etcd): a fresh one, on a fresh data dir, for
    /// every row of the memory tables and one for the QPS runs.
    #[arg(long, value_parser = Kind::parse)]
    pub server: Kind,
    /// The server's binary (default: actcd next to actcd-tables; etcd on PATH or /usr/bin/etcd).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// A few small rows of each table and small request counts (about a minute): a smoke test.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub quick: bool,
    /// The tables to run (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "storage,watch,qps")]
    pub only: Vec<Table>,
    /// Storage rows: etcd (its 8 rows), quick, or a list of KEYSxVERSIONSxKEYSIZExVALUESIZE like
    /// 100kx5x64x256.
    #[arg(long, default_value = "etcd", default_value_if("quick", "true", "quick"))]
    pub storage_rows: String,
    /// Watch rows: all (etcd's 15), quick, small, big, or a list of CLIENTSxSTREAMSxWATCHES like
    /// 1kx10x1.
    #[arg(long, default_value = "all", default_value_if("quick", "true", QUICK_WATCH_ROWS))]
    pub watch_rows: String,
    /// Requests of each QPS run at 1 conn / 1 client (etcd's doc: 10000).
    #[arg(long, default_value_t = 10_000, default_value_if("quick", "true", "300"), value_parser = value_parser!(u64).range(1..))]
    pub qps_small: u64,
    /// Requests of each QPS run at 100 conns / 1000 clients (etcd's doc: 100000).
    #[arg(long, default_value_t = 100_000, default_value_if("quick", "true", "3000"), value_parser = value_parser!(u64).range(1..))]
    pub qps_large: u64,
    #[command(flatten)]
    pub files: Files,
    /// Parent of the temp dir that holds the started servers' data dirs and logs.
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    #[command(flatten)]
    pub limits: RowLimits,
    /// Most memory (GiB) server and client may take together in a row; bigger rows are skipped.
    #[arg(long, default_value_t = 16, value_parser = value_parser!(u64).range(1..))]
    pub max_mem_gib: u64,
    /// --quota-backend-bytes of the servers (etcd's default 2 GiB is too small for 1M keys x 5
    /// versions of 1 KiB).
    #[arg(long, default_value_t = 8 << 30)]
    pub quota_backend_bytes: u64,
}

impl MeasureArgs {
    pub fn validate(&self) -> Result<(), String> {
        storetable::parse_rows(&self.storage_rows)?;
        memtable::parse_rows(&self.watch_rows).map(|_| ())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        // Thousands of connections need as many file descriptors, here and in the servers
        // started (they inherit the limit).
        if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
            out.note(format!("warning: cannot raise the open-file limit: {e}"));
        }
        let (now, started) = (Utc::now(), Instant::now());
        let Some(work) = stop.check(work_dir(&a.work_dir)) else { return };
        let spec = Spec::new(a.server, a.server_bin.clone(), work.path(), a.quota_backend_bytes);
        let Some(spec) = stop.check(spec) else { return };
        let mut doc = TablesDoc {
            server: a.server.name().to_string(),
            server_version: spec.version(),
            date: now.line.clone(),
            machine: procfs::machine_line(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            mode: format!(
                "{} started by tables on loopback: a fresh one on a fresh data dir per memory row, one for the QPS runs; --quota-backend-bytes {}; RSS = the server's VmRSS",
                spec.binary.display(),
                a.quota_backend_bytes
            ),
            storage: Vec::new(),
            watch: Vec::new(),
            qps: Vec::new(),
            total_secs: 0.0,
        };
        let m = Measure { base: settings, stop, a: &a, spec, name: doc.server.clone() };
        // In the order the text prints them, each once.
        for t in [Table::Storage, Table::Watch, Table::Qps].into_iter().filter(|t| a.only.contains(t)) {
            match t {
                Table::Storage => doc.storage = m.storage().await,
                Table::Watch => doc.watch = m.watch().await,
                Table::Qps => {
                    let runs = qpstable::runs(a.qps_small, a.qps_large);
                    doc.qps = qpstable::measure(&m.spec, (settings, stop, out), runs).await;
                }
            }
        }
        doc.total_secs = started.elapsed().as_secs_f64();
        let text = tablesdoc::text(&doc);
        out.print(&text);
        match tablesdoc::save(&a.files.dir(&now), &format!("{}-{}", now.stamp, doc.server), &doc, &text) {
            Ok(paths) => paths.iter().for_each(|p| eprintln!("tables: wrote {}", p.display())),
            Err(e) => stop.stop(e),
        }
        out.extra("tables", &doc);
        let failed = doc.incomplete();
        if failed > 0 {
            stop.stop(format!("{failed} rows did not complete (see the tables)"));
        }
    }
}

struct Measure<'a> {
    base: &'a Settings,
    stop: &'a Stop,
    a: &'a MeasureArgs,
    spec: Spec,
    name: String,
}

impl Measure<'_> {
    fn limits(&self) -> Limits {
        self.a.limits.plan(self.a.max_mem_gib << 30)
    }

    /// Runs a memory table's rows in order, each on a fresh server, or records it as skipped
    /// with the reason (interrupted, too large for the machine as `plan` says given the rows
    /// measured before it, no server to be had).
    async fn memory_rows<M: MemoryRow>(
        &self,
        table: &str,
        rows: Vec<M::Row>,
        plan: impl Fn(&M::Row, &[M]) -> Option<String>,
        measure: impl AsyncFn(&Server, &Stop, M::Row) -> M,
    ) -> Vec<M> {
        let mut results: Vec<M> = Vec::new();
        for row in rows {
            let spec = M::spec(&row);
            let skip =
                if self.stop.is_stopped() { Some("interrupted".to_string()) } else { plan(&row, &results) };
            let limit = self.a.limits.row_time_limit + self.a.limits.settle;
            let measured = match skip {
                Some(why) => Err(why),
                None => {
                    let load = async |server: &mut Server, stop: &Stop| {
                        eprintln!("tables: {table} {spec}: measuring on pid {}...", server.pid());
                        let mut r = measure(server, stop, row).await;
                        if let Some(why) = died(server) {
                            r.outcome().fail(why);
                        }
                        r
                    };
                    self.spec.on_fresh(&spec, self.stop, Some(limit), load).await
                }
            };
            results.push(match measured {
                Ok(mut r) => {
                    let o = r.outcome();
                    let incomplete =
                        o.failed.as_ref().map(|f| format!("; incomplete: {f}")).unwrap_or_default();
                    eprintln!(
                        "tables: {table} {spec}: {} RSS (idle {}){incomplete}",
                        mb(o.rss_bytes()),
                        mb(o.idle_bytes())
                    );
                    r
                }
                Err(why) => {
                    eprintln!("tables: {table} {spec}: skipped: {why}");
                    M::new(row, Outcome::skipped(self.name.clone(), why))
                }
            });
        }
        results
    }

    async fn storage(&self) -> Vec<StoreResult> {
        let rows = storetable::parse_rows(&self.a.storage_rows).unwrap_or_default();
        let plan = |row: &StoreRow, before: &[StoreResult]| {
            storetable::plan(row, before, self.spec.quota_bytes, &self.limits())
        };
        // The doc's put shape, 100 conns and 1000 clients: enough concurrency for either
        // server to batch its commits.
        let measure = async |server: &Server, stop: &Stop, row| {
            let mut settings = settings_for(self.base, server, 100, 1000);
            settings.request_timeout = settings.request_timeout.max(Duration::from_secs(60));
            storetable::measure(&settings, stop, row, server.pid(), self.name.clone(), self.a.limits.settle)
                .await
        };
        self.memory_rows("storage", rows, plan, measure).await
    }

    async fn watch(&self) -> Vec<RowResult> {
        let mut rows = memtable::parse_rows(&self.a.watch_rows).unwrap_or_default();
        // Smallest first: each row's estimate is fitted from the rows measured before it.
        rows.sort_by_key(|r| (r.watches(), r.streams(), r.clients));
        let plan = |row: &Row, before: &[RowResult]| {
            let verdict =
                memtable::plan(row, &memtable::machine(None), &self.limits(), &memtable::models_from(before));
            if let Verdict::Skip(why) = verdict {
                Some(why)
            } else {
                None
            }
        };
        let measure = async |server: &Server, stop: &Stop, row| {
            let settings = settings_for(self.base, server, 1, 1);
            let out = Out::new("watch-memory", &settings);
            watch_row::measure(&settings, stop, &out, &self.a.limits, row, server.pid(), self.name.clone())
                .await
        };
        self.memory_rows("watch", rows, plan, measure).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> Result<MeasureArgs, String> {
        actcd_bench::execute::parse_flags(argv)
    }

    #[test]
    fn flags_name_one_server() {
        assert!(args(&["--server", "actcd"]).and_then(|a| a.validate()).is_ok());
        for bad in [
            &[][..],
            &["--server", "consul"],
            &["--server", "etcd", "--only", "storage,disk"],
            &["--server", "etcd", "--storage-rows", "1x1"],
            &["--server", "etcd", "--qps-small", "0"],
        ] {
            assert!(args(bad).and_then(|a| a.validate()).is_err(), "{bad:?}");
        }
        let q = args(&["--server", "actcd", "--quick"]).expect("parses");
        assert_eq!(
            (&q.storage_rows[..], &q.watch_rows[..], q.qps_small, q.qps_large),
            ("quick", QUICK_WATCH_ROWS, 300, 3000)
        );
        let q = args(&["--server", "actcd", "--quick", "--qps-large=7"]).expect("parses");
        assert_eq!((&q.storage_rows[..], q.qps_small, q.qps_large), ("quick", 300, 7));
        let full = args(&["--server", "actcd"]).expect("parses");
        assert_eq!((&full.storage_rows[..], &full.watch_rows[..], full.qps_small), ("etcd", "all", 10_000));
    }
}
