//! The put/range QPS table of etcd's performance doc: puts of 8-byte sequential keys with
//! 256-byte values at 1 connection / 1 client and at 100 connections / 1000 clients, then
//! ranges of one key, linearizable and serializable, at both shapes; printed as the doc's two
//! tables (writes: keys, conns, clients, QPS, average latency, RSS; reads: requests, conns,
//! clients, consistency, QPS, average latency).

use actcd_bench::format::{count, mb};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// A run's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Puts of 8-byte sequential keys, 256-byte values.
    Put,
    /// Linearizable ranges of one key.
    RangeLinearizable,
    /// Serializable ranges of one key.
    RangeSerializable,
}

/// One run of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpsRun {
    /// What it sends.
    pub op: Op,
    /// Connections.
    pub conns: usize,
    /// Clients, spread over the connections.
    pub clients: usize,
    /// Requests in all.
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
    /// A short name: `put-1x1`, `range-s-100x1000`.
    pub fn name(&self) -> String {
        let op = match self.op {
            Op::Put => "put",
            Op::RangeLinearizable => "range-l",
            Op::RangeSerializable => "range-s",
        };
        format!("{op}-{}x{}", self.conns, self.clients)
    }
}

/// What a run measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QpsResult {
    /// The run.
    pub run: QpsRun,
    /// The server's name.
    pub server: String,
    /// Why the run stopped short, if it did.
    pub failed: Option<String>,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Requests per second.
    pub qps: f64,
    /// Mean latency, seconds.
    pub average_secs: f64,
    /// 99th percentile latency, seconds.
    pub p99_secs: f64,
    /// Server VmRSS after the run, KiB.
    pub server_rss_kb: u64,
    /// Cores this client kept busy during the run (it shares the machine with the server).
    pub client_cores: f64,
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
            "| keys | conns | clients | QPS | avg latency | p99 | RSS | errors | client cores |",
            true,
        ),
        (
            format!("Reads (one key with a {VAL_SIZE}-byte value):"),
            "| requests | conns | clients | consistency | QPS | avg latency | p99 | errors | client cores |",
            false,
        ),
    ];
    for (title, header, writes) in sections {
        let _ = writeln!(s, "{title}\n\n{header}");
        let align: Vec<&str> = header
            .trim_matches('|')
            .split('|')
            .map(|h| if h.trim() == "consistency" { " --- " } else { " ---: " })
            .collect();
        let _ = writeln!(s, "|{}|", align.join("|"));
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
mod tests {
    use super::*;

    #[test]
    fn runs_follow_the_doc() {
        let r = runs(10_000, 100_000);
        assert_eq!(r.len(), 6);
        assert_eq!(r[1].name(), "put-100x1000");
        assert_eq!(r[5].name(), "range-s-100x1000");
        let results: Vec<QpsResult> = r
            .iter()
            .map(|run| QpsResult {
                run: *run,
                server: "etcd".to_string(),
                failed: None,
                requests: run.total,
                errors: 0,
                qps: 1234.4,
                average_secs: 0.0016,
                p99_secs: 0.004,
                server_rss_kb: 48_000,
                client_cores: 0.5,
            })
            .collect();
        let t = table("etcd", &results);
        assert!(t.contains("| 10k | 1 | 1 | 1234 | 1.6 ms | 4.0 ms | 49.2 MB | 0 | 0.50 |"), "{t}");
        assert!(t.contains("| 100k | 100 | 1000 | Serializable | 1234 |"), "{t}");
        assert_eq!(t.lines().filter(|l| l.starts_with("| 1")).count(), 6);
    }
}
