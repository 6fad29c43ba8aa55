//! The put/range QPS table of etcd's performance doc: puts of 8-byte sequential keys with
//! 256-byte values at 1 connection / 1 client and at 100 connections / 1000 clients, then
//! ranges of one key, linearizable and serializable, at both shapes; printed as the doc's two
//! tables (writes: keys, conns, clients, QPS, average latency, RSS; reads: requests, conns,
//! clients, consistency, QPS, average latency); and the runs measured on one server.

use crate::server::{died, settings_for, Spec};
use actcd_bench::cmd::put::PutArgs;
use actcd_bench::cmd::range::{Consistency, RangeArgs};
use actcd_bench::conn::{bounded, dial_one, kv_client};
use actcd_bench::format::{count, mb, table_head};
use actcd_bench::output::{cpu_now, ClientCpu, Out};
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_proto::etcdserverpb::PutRequest;
use actcd_test_support::procfs;
use actcd_test_support::server::Server;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;

/// A run's operation: puts of 8-byte sequential keys with 256-byte values, or linearizable or
/// serializable ranges of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Put,
    RangeLinearizable,
    RangeSerializable,
}

/// One run of the table: what it sends, over how many connections and clients, how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpsRun {
    pub op: Op,
    pub conns: usize,
    pub clients: usize,
    pub total: u64,
}

/// Key size of the puts (etcd's doc: 8).
pub const KEY_SIZE: usize = 8;
/// Value size of the puts and of the key the ranges read (etcd's doc: 256).
pub const VAL_SIZE: usize = 256;

/// The runs, in the doc's order, with `small` requests at 1 × 1 and `large` at 100 × 1000
/// (the doc: 10,000 and 100,000).
pub fn runs(small: u64, large: u64) -> Vec<QpsRun> {
    let mut v = Vec::new();
    for op in [Op::Put, Op::RangeLinearizable, Op::RangeSerializable] {
        v.push(QpsRun { op, conns: 1, clients: 1, total: small });
        v.push(QpsRun { op, conns: 100, clients: 1000, total: large });
    }
    v
}

impl QpsRun {
    /// `put-1x1`, `range-s-100x1000`.
    pub fn name(&self) -> String {
        let op = match self.op {
            Op::Put => "put",
            Op::RangeLinearizable => "range-l",
            Op::RangeSerializable => "range-s",
        };
        format!("{op}-{}x{}", self.conns, self.clients)
    }
}

/// What a run measured: why it stopped short (if it did), successes, failures, successes a
/// second, mean and 99th percentile latency, the server's VmRSS after it, and the cores this
/// client kept busy (it shares the machine with the server).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QpsResult {
    pub run: QpsRun,
    pub server: String,
    pub failed: Option<String>,
    pub requests: u64,
    pub errors: u64,
    pub qps: f64,
    pub average_secs: f64,
    pub p99_secs: f64,
    pub server_rss_kb: u64,
    pub client_cores: f64,
}

const RANGE_KEY: &str = "foo";

/// Runs `runs` on one fresh server of `spec`, each under a stop of its own.
pub async fn measure(
    spec: &Spec,
    (base, stop, out): (&Settings, &Stop, &Out),
    runs: Vec<QpsRun>,
) -> Vec<QpsResult> {
    let load = async |server: &mut Server, stop: &Stop| {
        let (mut results, mut key_written) = (Vec::new(), false);
        for run in runs {
            if stop.is_stopped() {
                break;
            }
            let settings = settings_for(base, server, run.conns, run.clients);
            let (own, forward) = stop.child();
            let out = Out::new(&run.name(), &settings);
            let (cpu_start, started) = (cpu_now(), Instant::now());
            match run.op {
                Op::Put => {
                    PutArgs::sequential(KEY_SIZE, VAL_SIZE, run.total, run.total)
                        .run(&settings, &own, &out)
                        .await
                }
                op => {
                    if !std::mem::replace(&mut key_written, true) {
                        if let Err(e) = put_range_key(&settings).await {
                            own.stop(e);
                        }
                    }
                    let consistency =
                        if op == Op::RangeSerializable { Consistency::S } else { Consistency::L };
                    let (key, total) = (RANGE_KEY.to_string(), run.total);
                    let range = RangeArgs { key, consistency, total, ..RangeArgs::default() };
                    range.run(&settings, &own, &out).await
                }
            }
            let client_cores = ClientCpu::measure(cpu_start, started.elapsed()).map_or(0.0, |c| c.cores_used);
            forward.abort();
            let doc = out.document();
            let stats = doc.reports.first();
            let r = QpsResult {
                run,
                server: spec.kind.name().to_string(),
                failed: own.reason().or_else(|| died(server)),
                requests: stats.map_or(0, |s| s.requests),
                errors: stats.map_or(0, |s| s.errors),
                qps: stats.map_or(0.0, |s| s.requests_per_sec),
                average_secs: stats.map_or(0.0, |s| s.average_secs),
                p99_secs: stats.and_then(|s| s.percentile(99.0)).unwrap_or(0.0),
                server_rss_kb: procfs::memory(procfs::Proc::Pid(server.pid())).map_or(0, |m| m.rss_kb),
                client_cores,
            };
            let stopped = r.failed.as_ref().map(|f| format!("; stopped: {f}")).unwrap_or_default();
            eprintln!(
                "tables: qps {}: {:.0} requests/s, avg {:.2} ms, client {:.2} cores{stopped}",
                run.name(),
                r.qps,
                r.average_secs * 1e3,
                r.client_cores
            );
            results.push(r);
        }
        results
    };
    if stop.is_stopped() {
        return Vec::new();
    }
    spec.on_fresh("qps", stop, None, load).await.unwrap_or_else(|why| {
        out.note(format!("tables: qps: no server: {why}"));
        Vec::new()
    })
}

/// Puts [`RANGE_KEY`] with a value of the doc's size, so that the ranges read one real key.
async fn put_range_key(settings: &Settings) -> Result<(), String> {
    let value = Bytes::from(vec![b'v'; VAL_SIZE]);
    let req = PutRequest { key: Bytes::from_static(RANGE_KEY.as_bytes()), value, ..Default::default() };
    let mut kv = kv_client(dial_one(settings).await?);
    bounded(settings.request_timeout, kv.put(req))
        .await
        .map_err(|e| format!("putting the key the ranges read: {e}"))?;
    Ok(())
}

fn latency(secs: f64) -> String {
    format!("{:.1} ms", secs * 1e3)
}

fn qps(r: &QpsResult) -> String {
    match &r.failed {
        Some(why) => format!("{:.0} (stopped: {why})", r.qps),
        None => format!("{:.0}", r.qps),
    }
}

/// `server`'s runs as the doc's two tables, with the p99, the errors and the client's CPU.
pub fn table(server: &str, results: &[QpsResult]) -> String {
    let mine: Vec<&QpsResult> = results.iter().filter(|r| r.server == server).collect();
    let mut s = String::new();
    let sections = [
        (
            format!("Writes ({KEY_SIZE}-byte sequential keys, {VAL_SIZE}-byte values):"),
            "keys | conns | clients | QPS | avg latency | p99 | RSS | errors | client cores",
            true,
        ),
        (
            format!("Reads (one key with a {VAL_SIZE}-byte value):"),
            "requests | conns | clients | consistency | QPS | avg latency | p99 | errors | client cores",
            false,
        ),
    ];
    for (title, header, writes) in sections {
        let _ = writeln!(s, "{title}\n\n{}", table_head(header).trim_end());
        for r in mine.iter().filter(|r| (r.run.op == Op::Put) == writes) {
            let _ = writeln!(s, "{}", line(r));
        }
        let _ = writeln!(s);
    }
    s
}

/// One run as a row of its table: the reads carry their consistency, the writes the RSS.
fn line(r: &QpsResult) -> String {
    let mut cells = vec![count(r.run.total), r.run.conns.to_string(), r.run.clients.to_string()];
    match r.run.op {
        Op::RangeLinearizable => cells.push("Linearizable".to_string()),
        Op::RangeSerializable => cells.push("Serializable".to_string()),
        Op::Put => {}
    }
    cells.extend([qps(r), latency(r.average_secs), latency(r.p99_secs)]);
    if r.run.op == Op::Put {
        cells.push(mb(r.server_rss_kb as f64 * 1024.0));
    }
    cells.extend([r.errors.to_string(), format!("{:.2}", r.client_cores)]);
    format!("| {} |", cells.join(" | "))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A run of `server` that completed at `qps`.
    pub(crate) fn done(run: QpsRun, server: &str, qps: f64) -> QpsResult {
        let server = server.to_string();
        QpsResult {
            run,
            server,
            failed: None,
            requests: run.total,
            errors: 0,
            qps,
            average_secs: 0.0016,
            p99_secs: 0.004,
            server_rss_kb: 48_000,
            client_cores: 0.5,
        }
    }

    #[test]
    fn runs_follow_the_doc() {
        let r = runs(10_000, 100_000);
        assert_eq!(r.len(), 6);
        assert_eq!(r[1].name(), "put-100x1000");
        assert_eq!(r[5].name(), "range-s-100x1000");
        let results: Vec<QpsResult> = r.into_iter().map(|run| done(run, "etcd", 1234.4)).collect();
        let t = table("etcd", &results);
        assert!(t.contains("| 10k | 1 | 1 | 1234 | 1.6 ms | 4.0 ms | 49.2 MB | 0 | 0.50 |"), "{t}");
        assert!(t.contains("| 100k | 100 | 1000 | Serializable | 1234 |"), "{t}");
        assert_eq!(t.lines().filter(|l| l.starts_with("| 1")).count(), 6);
    }
}
