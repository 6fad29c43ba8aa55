//! etcd's storage-memory table, measured as server RSS: rows of N keys × versions per key × key
//! size × value size, each loaded into a fresh server, with what a row needs from the machine
//! (memory, disk, time) and whether it fits, and the table in etcd's layout ("overall memory
//! usage": N, versions, key size, value size, memory usage) with the RSS over idle split into a
//! per-key and a per-version part by least squares; and one row measured, from this separate
//! process.

use crate::fit::fit;
use crate::memtable::{machine, memory_room, Limits};
use crate::outcome::{memory_row, parse_rows as parse_rows_of, MemoryRow, Outcome};
use actcd_bench::cmd::put::PutArgs;
use actcd_bench::conn::{bounded, dial_one, kv_client};
use actcd_bench::format::{count, mb, per_item, table_head};
use actcd_bench::keys::varint_len;
use actcd_bench::output::Out;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{RangeRequest, StatusRequest};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;

/// One row: `keys` keys (N) of `key_size` bytes, each put `versions` times with
/// `val_size`-byte values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreRow {
    pub keys: u64,
    pub versions: u64,
    pub key_size: usize,
    pub val_size: usize,
}

const fn row(keys: u64, versions: u64, key_size: usize, val_size: usize) -> StoreRow {
    StoreRow { keys, versions, key_size, val_size }
}

/// The rows of etcd's "overall memory usage" table, in its order: 100K and 1M keys, 1 and 5
/// versions, 64-byte keys, 256-byte and 1 KiB values.
pub const ETCD_ROWS: [StoreRow; 8] = [
    row(100_000, 1, 64, 256),
    row(100_000, 5, 64, 256),
    row(1_000_000, 1, 64, 256),
    row(1_000_000, 5, 64, 256),
    row(100_000, 1, 64, 1024),
    row(100_000, 5, 64, 1024),
    row(1_000_000, 1, 64, 1024),
    row(1_000_000, 5, 64, 1024),
];

/// `--quick`: the same shape at 1/50 of the keys, enough to vary keys and versions for the fit.
pub const QUICK_ROWS: [StoreRow; 3] = [row(2000, 1, 64, 256), row(2000, 5, 64, 256), row(4000, 1, 64, 1024)];

impl StoreRow {
    pub fn puts(&self) -> u64 {
        self.keys * self.versions
    }

    pub fn bytes(&self) -> u64 {
        self.puts() * (self.key_size + self.val_size) as u64
    }

    /// The row as `--storage-rows` takes it: `100kx5x64x1024`.
    pub fn spec(&self) -> String {
        format!("{}x{}x{}x{}", count(self.keys), self.versions, self.key_size, self.val_size)
    }

    /// An estimate of the server's RSS over idle on the high side, bytes: every key indexed
    /// with generous overhead, and every version's bytes resident (etcd's bbolt is mmapped, so a
    /// written page can stay in its RSS).
    pub fn high_estimate(&self) -> f64 {
        self.keys as f64 * (self.key_size as f64 + 200.0)
            + self.puts() as f64 * (self.key_size + self.val_size) as f64 * 1.5
    }
}

/// Parses `--storage-rows`: `etcd` (etcd's 8 rows), `quick`, or a comma-separated list of
/// `KEYSxVERSIONSxKEYSIZExVALUESIZE` (counts may use k and M: `1Mx5x64x1024`).
pub fn parse_rows(spec: &str) -> Result<Vec<StoreRow>, String> {
    let usage = "KEYSxVERSIONSxKEYSIZExVALUESIZE (like 1Mx5x64x1024), or etcd, quick";
    let set = |name: &str| match name {
        "etcd" | "all" => Some(ETCD_ROWS.to_vec()),
        "quick" => Some(QUICK_ROWS.to_vec()),
        _ => None,
    };
    let rows = parse_rows_of(spec, ("storage row", 4, usage), set, |n| {
        Ok(row(n[0], n[1], n[2] as usize, n[3] as usize))
    })?;
    match rows.iter().find(|r| varint_len(r.keys.saturating_sub(1) as i64) > r.key_size) {
        Some(r) => Err(format!(
            "storage row {}: {}-byte keys cannot hold {} distinct keys",
            r.spec(),
            r.key_size,
            r.keys
        )),
        None => Ok(rows),
    }
}

/// What a row measured (or why it did not run): the puts acknowledged, the keys the server
/// counted after the load (a Range over every key, count only), the backend size it reports
/// (Status db_size), and the seconds the load took.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StoreResult {
    pub row: StoreRow,
    /// The server, whether the row ran, its RSS after the load.
    #[serde(flatten)]
    pub outcome: Outcome,
    pub puts_done: u64,
    pub keys_counted: u64,
    pub db_size_bytes: u64,
    pub load_secs: f64,
}

memory_row!(StoreResult, StoreRow);

impl StoreResult {
    /// Whether the row ran to the end: every put acknowledged, every key counted, RSS read.
    pub fn complete(&self) -> bool {
        self.outcome.ran() && self.puts_done == self.row.puts() && self.keys_counted == self.row.keys
    }

    pub fn bytes_per_sec(&self) -> Option<f64> {
        (self.complete() && self.load_secs > 0.0).then(|| self.row.bytes() as f64 / self.load_secs)
    }
}

/// Why `row` does not fit, given the rows measured `before` it: its backend over `quota`, its
/// memory over the machine's or the budget, its load time (at the last row's rate) over the
/// row limit.
pub fn plan(row: &StoreRow, before: &[StoreResult], quota: u64, limits: &Limits) -> Option<String> {
    let gb = |b: f64| b / 1e9;
    let backend = row.bytes() as f64 * 1.3;
    if backend > quota as f64 {
        let quota = gb(quota as f64);
        return Some(format!(
            "its ~{:.1} GB of backend is over --quota-backend-bytes ({quota:.1} GB)",
            gb(backend)
        ));
    }
    // The idle server and the load client, plus the most RSS per byte loaded seen so far (at
    // least the row's high estimate).
    let complete = before.iter().filter(|r| r.complete());
    let per_byte = complete.map(|r| r.outcome.delta_bytes() / r.row.bytes() as f64).fold(0.0, f64::max);
    let need = (300e6 + row.high_estimate().max(per_byte * row.bytes() as f64)) * limits.margin;
    if let Some(why) = memory_room(need, &machine(None), limits) {
        return Some(format!("needs ~{:.1} GB, {why}", gb(need)));
    }
    let rate = before.iter().rev().find_map(StoreResult::bytes_per_sec)?;
    let secs = row.bytes() as f64 / rate * limits.margin;
    (secs > limits.max_secs).then(|| {
        format!(
            "its load would take ~{secs:.0} s at the {:.1} MB/s of the previous row, over the {:.0} s row time limit",
            rate / 1e6,
            limits.max_secs
        )
    })
}

/// Loads `row` into the server at `settings.endpoints` (pid `pid`) with `put` (sequential key
/// numbers, so every key gets exactly `versions` puts; single puts, as etcd's benchmark sends
/// them: transactions of many puts would inflate etcd's in-memory raft log, which keeps its
/// last 100,000 entries), checks that the server counts the row's keys, waits `settle` and
/// reads the server's VmRSS.
pub async fn measure(
    settings: &Settings,
    stop: &Stop,
    row: StoreRow,
    pid: u32,
    server: String,
    settle: Duration,
) -> StoreResult {
    let mut r = StoreResult::new(row, Outcome::start(server, pid));
    if r.outcome.failed.is_some() {
        return r;
    }
    let out = Out::new("put", settings);
    PutArgs::sequential(row.key_size, row.val_size, row.puts(), row.keys).run(settings, stop, &out).await;
    if let Some(stats) = out.document().reports.first() {
        (r.puts_done, r.load_secs) = (stats.requests, stats.total_secs);
        if let Some(e) = stats.error_distribution.first() {
            r.outcome.fail(format!("{} of {} puts failed: {}", stats.errors, row.puts(), e.error));
        }
    }
    if let Some(why) = stop.reason() {
        r.outcome.fail(why);
    }
    match count_keys(settings).await {
        Ok((keys, db_size)) => (r.keys_counted, r.db_size_bytes) = (keys, db_size),
        Err(e) => r.outcome.fail(e),
    }
    tokio::time::sleep(settle).await;
    r.outcome.finish(pid);
    if r.keys_counted != row.keys {
        r.outcome.fail(format!("the server counts {} keys, the row loaded {}", r.keys_counted, row.keys));
    }
    r
}

/// Every key counted by the server (a Range over all keys, count only) and its backend size.
async fn count_keys(settings: &Settings) -> Result<(u64, u64), String> {
    let channel = dial_one(settings).await?;
    let all = RangeRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        count_only: true,
        ..Default::default()
    };
    let bound = settings.request_timeout;
    let counted = bounded(bound, kv_client(channel.clone()).range(all))
        .await
        .map_err(|e| format!("counting the keys: {e}"))?;
    let status = bounded(bound, MaintenanceClient::new(channel).status(StatusRequest {}))
        .await
        .map_err(|e| format!("Status: {e}"))?;
    let size = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok((size(counted.into_inner().count), size(status.into_inner().db_size)))
}

/// The fit of `server`'s complete rows: RSS over idle ≈ a·keys + b·(keys·versions), with the
/// number of rows. Per key includes the key's bytes; per version the value's share that stays
/// resident.
pub fn coefficients(server: &str, results: &[StoreResult]) -> (Option<[f64; 2]>, usize) {
    let pts: Vec<([f64; 2], f64)> = results
        .iter()
        .filter(|r| r.outcome.server == server && r.complete())
        .map(|r| ([r.row.keys as f64, r.row.puts() as f64], r.outcome.delta_bytes()))
        .collect();
    (fit(&pts, 1e6), pts.len())
}

fn bytes_label(n: usize) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{}KB", n / 1024)
    } else {
        format!("{n}bytes")
    }
}

/// The table of `server`'s rows in etcd's layout (N, versions, key size, value size, memory
/// usage), with the idle RSS, the RSS over idle per key, the load time and rate and the backend
/// size; skipped and failed rows with the reason; the fit under it.
pub fn table(server: &str, results: &[StoreResult]) -> String {
    let rows: Vec<&StoreResult> = results.iter().filter(|r| r.outcome.server == server).collect();
    let mut s = table_head("N | versions | key size | value size | memory usage (RSS) | idle RSS | over idle per key | load | puts/s | db size");
    for r in &rows {
        let lead = format!(
            "| {} | {} | {} | {} |",
            count(r.row.keys).to_uppercase(),
            r.row.versions,
            bytes_label(r.row.key_size),
            bytes_label(r.row.val_size)
        );
        if let Some(why) = &r.outcome.skipped {
            let _ = writeln!(s, "{lead} skipped: {why} | | | | | |");
            continue;
        }
        let memory = match &r.outcome.failed {
            Some(why) => format!("{} (incomplete: {why})", mb(r.outcome.rss_bytes())),
            None => mb(r.outcome.rss_bytes()),
        };
        let _ = writeln!(
            s,
            "{lead} {memory} | {} | {} | {:.1} s | {:.0} | {} |",
            mb(r.outcome.idle_bytes()),
            per_item(r.outcome.delta_bytes() / r.row.keys.max(1) as f64),
            r.load_secs,
            if r.load_secs > 0.0 { r.puts_done as f64 / r.load_secs } else { 0.0 },
            mb(r.db_size_bytes as f64)
        );
    }
    let _ = writeln!(s);
    match coefficients(server, results) {
        (Some([per_key, per_version]), n) => {
            let _ = writeln!(
                s,
                "{server}: RSS over idle ≈ a·N + b·N·versions with a = {} per key, b = {} per version (least squares over {n} rows, relative error)",
                per_item(per_key),
                per_item(per_version)
            );
        }
        (None, n) => {
            let _ = writeln!(
                s,
                "{server}: no fit: {n} complete rows do not vary keys and versions independently"
            );
        }
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A complete row of actcd whose RSS over idle is exactly per key and per version.
    pub(crate) fn done(r: StoreRow, per_key: f64, per_version: f64) -> StoreResult {
        let delta = per_key * r.keys as f64 + per_version * r.puts() as f64;
        let rss = 20_000 + (delta / 1024.0) as u64;
        StoreResult {
            puts_done: r.puts(),
            keys_counted: r.keys,
            db_size_bytes: r.bytes(),
            load_secs: 2.0,
            ..StoreResult::new(
                r,
                Outcome {
                    server: "actcd".to_string(),
                    server_rss_idle_kb: 20_000,
                    server_rss_kb: rss,
                    server_hwm_kb: rss,
                    ..Outcome::default()
                },
            )
        }
    }

    #[test]
    fn rows_parse() {
        assert_eq!(parse_rows("etcd").map(|r| r.len()), Ok(8));
        assert_eq!(parse_rows("1Mx5x64x1k"), Ok(vec![row(1_000_000, 5, 64, 1000)]));
        assert_eq!(parse_rows("100kx1x64x1024,etcd").map(|r| r.len()), Ok(8));
        assert!(parse_rows("1Mx5x64").is_err());
        assert!(parse_rows("1Mx5x2x64").is_err(), "2-byte keys cannot hold 1M keys");
        assert!(parse_rows("").is_err());
        assert_eq!(row(1_000_000, 5, 64, 1024).spec(), "1Mx5x64x1024");
    }

    #[test]
    fn table_has_etcd_layout_fit_and_skips() {
        let mut results: Vec<StoreResult> = ETCD_ROWS[..6].iter().map(|r| done(*r, 150.0, 40.0)).collect();
        results.push(StoreResult::new(
            ETCD_ROWS[6],
            Outcome::skipped("actcd".to_string(), "needs ~9 GiB".to_string()),
        ));
        let t = table("actcd", &results);
        assert!(t.contains("| 100K | 1 | 64bytes | 256bytes | "), "{t}");
        assert!(t.contains("| 1M | 1 | 64bytes | 1KB | skipped: needs ~9 GiB |"), "{t}");
        assert!(t.contains("a = 150 B per key, b = 40 B per version"), "{t}");
        assert_eq!(coefficients("actcd", &results).1, 6);
        assert!(table("etcd", &results).contains("no fit"));
    }
}
