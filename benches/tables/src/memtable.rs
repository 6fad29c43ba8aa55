//! etcd's watch-memory table: rows of clients × streams per client × watches per stream, what a
//! row needs from the machine (file descriptors, memory, time) and whether it fits, the
//! least-squares fit of `memory ≈ c1·conns + c2·streams + c3·watches`, and the table in etcd's
//! layout with the fit under it.
//!
//! A row is measured on a fresh server (see `cmd::watch_memory`); its result is one JSON
//! document. The plan and the table are computed from such documents, so a driver that restarts
//! the server per row (`benches/watch-memory`) needs no arithmetic of its own.

use crate::outcome::Outcome;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One row: clients (one connection each) × watch streams per client × watches per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Clients, one HTTP/2 connection each.
    pub clients: u64,
    /// Watch streams on each connection.
    pub streams_per_client: u64,
    /// Watches on each stream.
    pub watches_per_stream: u64,
}

const fn row(clients: u64, streams_per_client: u64, watches_per_stream: u64) -> Row {
    Row { clients, streams_per_client, watches_per_stream }
}

/// etcd's 15 rows, in the order of its table.
pub const ETCD_ROWS: [Row; 15] = [
    row(1000, 1, 1),
    row(2000, 1, 1),
    row(5000, 1, 1),
    row(1000, 10, 1),
    row(2000, 10, 1),
    row(5000, 10, 1),
    row(1000, 50, 1),
    row(2000, 50, 1),
    row(5000, 50, 1),
    row(1000, 50, 10),
    row(2000, 50, 10),
    row(5000, 50, 10),
    row(1000, 50, 100),
    row(2000, 50, 100),
    row(5000, 50, 100),
];

/// The rows `quick` (the default) runs: etcd's rows of at most 100k streams and 5M watches
/// (all but the 5k-client rows of 50 streams and the 10M and 25M watch rows); on a lean server
/// a few minutes on a 2-core machine. The rest is `big`.
pub fn quick_rows() -> Vec<Row> {
    ETCD_ROWS.iter().copied().filter(|r| r.streams() <= 100_000 && r.watches() <= 5_000_000).collect()
}

/// The rows `small` runs: etcd's rows of at most 2k clients, 50k streams and 500k watches, six
/// rows that still vary conns, streams and watches on their own (enough for the fit), for a
/// server with kilobytes per watch (etcd: about a minute).
pub fn small_rows() -> Vec<Row> {
    ETCD_ROWS
        .iter()
        .copied()
        .filter(|r| r.clients <= 2000 && r.streams() <= 50_000 && r.watches() <= 500_000)
        .collect()
}

impl Row {
    /// Streams in all.
    pub fn streams(&self) -> u64 {
        self.clients * self.streams_per_client
    }

    /// Watches in all.
    pub fn watches(&self) -> u64 {
        self.streams() * self.watches_per_stream
    }

    /// The formula's terms: conns, streams, watches.
    pub fn terms(&self) -> [f64; 3] {
        [self.clients as f64, self.streams() as f64, self.watches() as f64]
    }

    /// The row as `--rows` takes it: `1kx50x100`.
    pub fn spec(&self) -> String {
        format!(
            "{}x{}x{}",
            count(self.clients),
            count(self.streams_per_client),
            count(self.watches_per_stream)
        )
    }
}

/// A count as etcd's table writes it: 1k, 2.5M, 50.
pub fn count(n: u64) -> String {
    let short = |v: f64, unit: &str| {
        if v.fract() == 0.0 {
            format!("{v:.0}{unit}")
        } else {
            format!("{v}{unit}")
        }
    };
    if n >= 1_000_000 && n % 100_000 == 0 {
        short(n as f64 / 1e6, "M")
    } else if n >= 1000 && n % 100 == 0 {
        short(n as f64 / 1e3, "k")
    } else {
        n.to_string()
    }
}

/// A count as `--rows` writes it: 1000, 1k, 2.5M.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000.0),
        Some((i, 'm' | 'M')) => (&s[..i], 1_000_000.0),
        _ => (s, 1.0),
    };
    let v: f64 = digits.parse().map_err(|_| format!("{s:?} is not a count (like 1000, 1k or 2.5M)"))?;
    let n = v * mult;
    if !(n >= 1.0 && n.fract() == 0.0 && n <= 1e12) {
        return Err(format!("{s:?} is not a positive whole count"));
    }
    Ok(n as u64)
}

/// Parses `--rows`: `all` (etcd's 15 rows), `quick`, `small`, `big` (etcd's rows not in quick),
/// or a comma-separated list of `CLIENTSxSTREAMSxWATCHES` (counts may use k and M: `2kx50x100`).
/// Sets and rows mix: `quick,2kx50x100`. Duplicates are dropped.
pub fn parse_rows(spec: &str) -> Result<Vec<Row>, String> {
    let mut rows: Vec<Row> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<Row> = match part {
            "all" => ETCD_ROWS.to_vec(),
            "quick" => quick_rows(),
            "small" => small_rows(),
            "big" => {
                let quick = quick_rows();
                ETCD_ROWS.iter().filter(|r| !quick.contains(r)).copied().collect()
            }
            _ => {
                let fields: Vec<&str> = part.split(['x', 'X', '*']).collect();
                let [c, s, w] = fields.as_slice() else {
                    return Err(format!(
                        "row {part:?}: expected CLIENTSxSTREAMSxWATCHES (like 1kx10x100), or all, quick, small, big"
                    ));
                };
                vec![row(parse_count(c)?, parse_count(s)?, parse_count(w)?)]
            }
        };
        for r in add {
            if !rows.contains(&r) {
                rows.push(r);
            }
        }
    }
    if rows.is_empty() {
        return Err("--rows is empty".to_string());
    }
    Ok(rows)
}

/// What a row measured (or why it did not run): the `row` figure of a `watch-memory` JSON
/// document.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RowResult {
    /// The row.
    pub row: Row,
    /// The server, whether the row ran, its RSS with every watch created.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// This client's VmRSS before connecting, KiB.
    pub client_rss_idle_kb: u64,
    /// This client's VmRSS with every watch created, KiB.
    pub client_rss_kb: u64,
    /// Connections dialed.
    pub conns_opened: u64,
    /// Streams opened.
    pub streams_opened: u64,
    /// Watches whose created response arrived.
    pub watches_created: u64,
    /// Seconds from the first dial to the last created response.
    pub setup_secs: f64,
}

impl RowResult {
    /// A row with `outcome` and nothing opened yet.
    pub fn new(row: Row, outcome: Outcome) -> Self {
        Self {
            row,
            outcome,
            client_rss_idle_kb: 0,
            client_rss_kb: 0,
            conns_opened: 0,
            streams_opened: 0,
            watches_created: 0,
            setup_secs: 0.0,
        }
    }

    /// A row that did not run, and why.
    pub fn skipped(row: Row, server: String, reason: String) -> Self {
        Self::new(row, Outcome::skipped(server, reason))
    }

    /// Whether the row ran to the end: every watch created and the RSS read.
    pub fn complete(&self) -> bool {
        self.outcome.ran() && self.watches_created == self.row.watches()
    }

    /// Client bytes over idle.
    pub fn client_delta_bytes(&self) -> f64 {
        (self.client_rss_kb as f64 - self.client_rss_idle_kb as f64) * 1024.0
    }
}

/// Reads the `row` figure of each `watch-memory` JSON document and the `watch` rows of each
/// `measure` document (a document with neither, such as another command's, is passed over).
/// Returns the rows and, per unreadable file or row, why.
pub fn load_results(paths: &[std::path::PathBuf]) -> (Vec<RowResult>, Vec<String>) {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        let parsed = std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).map_err(|e| e.to_string()));
        match parsed {
            Ok(doc) => {
                let single = doc.get("extra").and_then(|e| e.get("row")).into_iter();
                let measured = doc.get("watch").and_then(|w| w.as_array()).into_iter().flatten();
                for r in single.chain(measured) {
                    match serde_json::from_value::<RowResult>(r.clone()) {
                        Ok(r) => rows.push(r),
                        Err(e) => problems.push(format!("{}: {e}", p.display())),
                    }
                }
            }
            Err(e) => problems.push(format!("{}: {e}", p.display())),
        }
    }
    (rows, problems)
}

/// Least squares of `y ≈ c·x` (no intercept) over `(x, y)` points, each point's residual
/// weighted by `1 / max(|y|, floor)`: the fit minimizes relative error, so a 1k-watch row counts
/// as much as a 10M-watch one. `None` when the points do not determine the `N` coefficients.
pub fn fit<const N: usize>(points: &[([f64; N], f64)], floor: f64) -> Option<[f64; N]> {
    if points.len() < N || N == 0 {
        return None;
    }
    // Columns scaled to a maximum of 1, so that conditioning is judged on shape, not units.
    let mut scale = [0f64; N];
    for (x, _) in points {
        for (s, v) in scale.iter_mut().zip(x) {
            *s = s.max(v.abs());
        }
    }
    if scale.contains(&0.0) {
        return None;
    }
    // The augmented normal equations, N rows of N + 1.
    let mut a = vec![vec![0f64; N + 1]; N];
    for (x, y) in points {
        let w = 1.0 / y.abs().max(floor);
        let xs: Vec<f64> = x.iter().zip(&scale).map(|(v, s)| v / s * w).collect();
        for (i, row) in a.iter_mut().enumerate() {
            for (j, cell) in row.iter_mut().take(N).enumerate() {
                *cell += xs[i] * xs[j];
            }
            row[N] += xs[i] * y * w;
        }
    }
    let trace: f64 = (0..N).map(|i| a[i][i]).sum();
    // Gaussian elimination with partial pivoting.
    for col in 0..N {
        let pivot = (col..N).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        a.swap(col, pivot);
        if a[col][col].abs() <= trace * 1e-10 {
            return None;
        }
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut c = [0f64; N];
    for (i, ci) in c.iter_mut().enumerate() {
        *ci = a[i][N] / a[i][i] / scale[i];
    }
    Some(c)
}

/// `base + c·terms`, the coefficients taken as at least 0.
pub fn predict(base: f64, c: &[f64; 3], terms: &[f64; 3]) -> f64 {
    base + c.iter().zip(terms).map(|(c, t)| c.max(0.0) * t).sum::<f64>()
}

/// A per-row cost model (bytes or seconds): a base plus c1·conns + c2·streams + c3·watches.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// What every row pays (the idle server or client).
    pub base: f64,
    /// Per connection, per stream, per watch.
    pub per: [f64; 3],
    /// Where the coefficients come from (a fit of N rows, or defaults).
    pub source: String,
}

impl Model {
    /// The model's figure for `row`.
    pub fn predict(&self, row: &Row) -> f64 {
        predict(self.base, &self.per, &row.terms())
    }
}

/// The models a plan estimates with: server memory, client memory, setup time.
#[derive(Debug, Clone)]
pub struct Models {
    /// Server RSS, bytes.
    pub server: Model,
    /// Client RSS, bytes.
    pub client: Model,
    /// Seconds from the first dial to the last created response.
    pub time: Model,
}

/// Coefficients used until three independent rows are measured: etcd 3.4 on a 2-core machine
/// (DESIGN.md: ~107 KB per connection, ~45 KB per stream, up to ~5 KB per watch), a tonic client,
/// and a slow setup, all on the high side so that the first estimates skip rather than swap.
pub fn default_models() -> Models {
    Models {
        server: Model {
            base: 100e6,
            per: [110e3, 50e3, 5e3],
            source: "default coefficients (etcd 3.4 on this machine, high side)".to_string(),
        },
        client: Model { base: 20e6, per: [60e3, 20e3, 200.0], source: "default coefficients".to_string() },
        time: Model { base: 1.0, per: [2e-3, 5e-4, 2e-5], source: "default coefficients".to_string() },
    }
}

/// The models fitted from `results` (complete rows only), each falling back to
/// [`default_models`] when the rows do not determine it. While every measured row has one watch
/// per stream (streams and watches equal), c1 and c2 + c3 are fitted and c3 keeps its default:
/// the estimate of a one-watch row stays close and that of a many-watch row stays high.
pub fn models_from(results: &[RowResult]) -> Models {
    let done: Vec<&RowResult> = results.iter().filter(|r| r.complete()).collect();
    let one_watch = done.iter().all(|r| r.row.watches_per_stream == 1);
    let defaults = default_models();
    let source = format!("a fit of {} measured rows", done.len());
    let model = |f: &dyn Fn(&RowResult) -> f64, floor: f64, base: f64, default: &Model| -> Model {
        let full: Vec<([f64; 3], f64)> = done.iter().map(|r| (r.row.terms(), f(r))).collect();
        if let Some(per) = fit(&full, floor) {
            return Model { base, per, source: source.clone() };
        }
        let two: Vec<([f64; 2], f64)> =
            done.iter().map(|r| ([r.row.clients as f64, r.row.streams() as f64], f(r))).collect();
        match fit(&two, floor) {
            Some([c1, c23]) if one_watch => Model {
                base,
                per: [c1, c23, default.per[2]],
                source: format!("{source} of one watch per stream (per-watch default)"),
            },
            _ => default.clone(),
        }
    };
    let max_of = |f: &dyn Fn(&RowResult) -> f64| done.iter().map(|r| f(r)).fold(0.0, f64::max);
    let server_base =
        if done.is_empty() { defaults.server.base } else { max_of(&|r| r.outcome.idle_bytes()) };
    let client_base = if done.is_empty() {
        defaults.client.base
    } else {
        max_of(&|r| r.client_rss_idle_kb as f64 * 1024.0)
    };
    Models {
        server: model(&|r| r.outcome.delta_bytes(), 1e6, server_base, &defaults.server),
        client: model(&|r| r.client_delta_bytes(), 1e6, client_base, &defaults.client),
        time: model(&|r| r.setup_secs, 0.5, defaults.time.base, &defaults.time),
    }
}

/// What the machine offers a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    /// `MemAvailable`, bytes (read while no server runs).
    pub mem_available: u64,
    /// The client's open-file limit.
    pub client_fds: u64,
    /// The server's open-file limit (the client's when not known).
    pub server_fds: u64,
}

/// Limits a plan applies on top of the machine's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Memory kept free for the rest of the machine, bytes.
    pub reserve: u64,
    /// Longest setup a row may take, seconds.
    pub max_secs: f64,
    /// Estimates are multiplied by this before they are compared with the machine.
    pub margin: f64,
    /// Most memory server and client may take together, bytes, however much the machine has.
    pub budget: u64,
}

/// File descriptors a process needs besides one per connection (listeners, logs, the store's
/// files).
pub const FD_SLACK: u64 = 200;

/// Whether a row runs, with its estimates.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It fits: estimated server bytes, client bytes, setup seconds.
    Run {
        /// Server RSS, bytes.
        server: f64,
        /// Client RSS, bytes.
        client: f64,
        /// Setup seconds.
        secs: f64,
    },
    /// It does not fit, and why.
    Skip(String),
}

/// Decides whether `row` fits `machine` under `limits`, estimating with `models`.
pub fn plan(row: &Row, machine: &Machine, limits: &Limits, models: &Models) -> Verdict {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    if row.clients + FD_SLACK > machine.client_fds {
        return Verdict::Skip(format!(
            "needs {} client file descriptors, the limit is {} (ulimit -n)",
            row.clients + FD_SLACK,
            machine.client_fds
        ));
    }
    if row.clients + FD_SLACK > machine.server_fds {
        return Verdict::Skip(format!(
            "needs {} server file descriptors, the server's limit is {}",
            row.clients + FD_SLACK,
            machine.server_fds
        ));
    }
    let server = models.server.predict(row) * limits.margin;
    let client = models.client.predict(row) * limits.margin;
    if let Some(why) = memory_room(server + client, machine, limits) {
        return Verdict::Skip(format!(
            "needs ~{:.1} GiB (server ~{:.1}, client ~{:.1}; server from {}), {why}",
            gib(server + client),
            gib(server),
            gib(client),
            models.server.source,
        ));
    }
    let secs = models.time.predict(row) * limits.margin;
    if secs > limits.max_secs {
        return Verdict::Skip(format!(
            "setup would take ~{secs:.0} s (from {}), over the {:.0} s row limit",
            models.time.source, limits.max_secs
        ));
    }
    Verdict::Run { server, client, secs }
}

/// Why `bytes` do not fit: more than the machine has free after the reserve, or more than the
/// budget; `None` when they fit.
pub fn memory_room(bytes: f64, machine: &Machine, limits: &Limits) -> Option<String> {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let free = machine.mem_available.saturating_sub(limits.reserve) as f64;
    if bytes > free {
        Some(format!("{:.1} GiB free after a {:.1} GiB reserve", gib(free), gib(limits.reserve as f64)))
    } else if bytes > limits.budget as f64 {
        Some(format!("over the {:.1} GiB budget for server and client together", gib(limits.budget as f64)))
    } else {
        None
    }
}

/// Bytes as etcd's table writes memory: MB (10^6), one decimal below 100.
pub fn mb(bytes: f64) -> String {
    let v = bytes / 1e6;
    if v.abs() < 100.0 {
        format!("{v:.1} MB")
    } else {
        format!("{v:.0} MB")
    }
}

/// Bytes per item: B below 10 kB, else KB (10^3), as etcd quotes c1/c2/c3.
pub fn per_item(bytes: f64) -> String {
    if bytes.abs() < 10e3 {
        format!("{bytes:.0} B")
    } else {
        format!("{:.1} KB", bytes / 1e3)
    }
}

/// One step of a row shape: from `from` to `to` watches per stream at the same clients and
/// streams per client, the server's RSS growth divided by the watches added. Unlike c3 (fitted
/// over every row), it shows where a shape's cost per watch grows in steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchStep {
    /// Clients of the shape.
    pub clients: u64,
    /// Streams per client of the shape.
    pub streams_per_client: u64,
    /// Watches per stream before.
    pub from: u64,
    /// Watches per stream after.
    pub to: u64,
    /// RSS bytes per added watch.
    pub per_watch: f64,
}

/// The steps between `server`'s complete rows that differ only in watches per stream, each row
/// against the next larger one of its shape. A row measured more than once (results of several
/// runs) counts with its mean RSS.
pub fn watch_steps(server: &str, results: &[RowResult]) -> Vec<WatchStep> {
    let mut sums: std::collections::BTreeMap<(u64, u64, u64), (f64, f64)> = std::collections::BTreeMap::new();
    for r in results.iter().filter(|r| r.outcome.server == server && r.complete()) {
        let sum =
            sums.entry((r.row.clients, r.row.streams_per_client, r.row.watches_per_stream)).or_default();
        *sum = (sum.0 + r.outcome.rss_bytes(), sum.1 + 1.0);
    }
    let means: Vec<((u64, u64, u64), f64)> = sums.into_iter().map(|(k, (total, n))| (k, total / n)).collect();
    means
        .windows(2)
        .filter_map(|pair| {
            let (((clients, streams_per_client, from), a), ((c2, s2, to), b)) = (pair[0], pair[1]);
            let added = clients * streams_per_client * (to - from);
            ((clients, streams_per_client) == (c2, s2)).then(|| WatchStep {
                clients,
                streams_per_client,
                from,
                to,
                per_watch: (b - a) / added as f64,
            })
        })
        .collect()
}

/// The fitted c1, c2, c3 of `server`'s complete rows, and how many rows there were.
pub fn coefficients(server: &str, results: &[RowResult]) -> (Option<[f64; 3]>, usize) {
    let pts: Vec<([f64; 3], f64)> = results
        .iter()
        .filter(|r| r.outcome.server == server && r.complete())
        .map(|r| (r.row.terms(), r.outcome.delta_bytes()))
        .collect();
    (fit(&pts, 1e6), pts.len())
}

/// The rows both servers measured, RSS side by side with the ratio `other / base`, and the
/// fitted coefficients of both with their ratios.
pub fn side_by_side(base: &str, other: &str, results: &[RowResult]) -> String {
    let find = |server: &str, row: &Row| {
        results.iter().find(|r| r.outcome.server == server && r.row == *row && r.complete())
    };
    let mut rows: Vec<Row> =
        results.iter().filter(|r| r.outcome.server == base && r.complete()).map(|r| r.row).collect();
    rows.sort_by_key(|r| (r.streams_per_client, r.watches_per_stream, r.clients));
    rows.dedup();
    let mut s = String::new();
    let _ = writeln!(s, "| clients | streams per client | watchers per stream | watchers total | {base} RSS | {other} RSS | {other}/{base} | {base} over idle | {other} over idle | {other}/{base} |");
    let _ = writeln!(s, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        let (Some(b), Some(o)) = (find(base, row), find(other, row)) else {
            continue;
        };
        let (rb, ro) = (b.outcome.rss_bytes(), o.outcome.rss_bytes());
        let (db, dob) = (b.outcome.delta_bytes(), o.outcome.delta_bytes());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {:.2} |",
            count(row.clients),
            count(row.streams_per_client),
            count(row.watches_per_stream),
            count(row.watches()),
            mb(rb),
            mb(ro),
            ro / rb,
            mb(db),
            mb(dob),
            dob / db
        );
    }
    // Both fits over the rows both measured, so that the ratios compare like with like.
    let common: Vec<RowResult> = results
        .iter()
        .filter(|r| r.complete() && find(base, &r.row).is_some() && find(other, &r.row).is_some())
        .cloned()
        .collect();
    let (cb, nb) = coefficients(base, &common);
    let (co, no) = coefficients(other, &common);
    let _ = writeln!(s);
    let _ = writeln!(s, "Fitted over the {nb} rows both measured:");
    let _ = writeln!(s);
    let _ = writeln!(s, "| coefficient | {base} ({nb} rows) | {other} ({no} rows) | {other}/{base} |");
    let _ = writeln!(s, "| --- | ---: | ---: | ---: |");
    for (i, what) in ["c1, per connection", "c2, per stream", "c3, per watch"].iter().enumerate() {
        let show = |c: &Option<[f64; 3]>| c.map(|c| per_item(c[i])).unwrap_or_else(|| "no fit".to_string());
        let ratio = match (cb, co) {
            (Some(b), Some(o)) if b[i] > 0.0 => format!("{:.2}", o[i] / b[i]),
            _ => "—".to_string(),
        };
        let _ = writeln!(s, "| {what} | {} | {} | {ratio} |", show(&cb), show(&co));
    }
    s
}

/// The table of one server's rows in etcd's layout (clients, streams per client, watchers per
/// stream, watchers total, memory usage), with the idle RSS, the RSS over idle, the fit's
/// figure per row, and the fitted coefficients under it. Skipped and failed rows are listed
/// with the reason.
pub fn table(server: &str, results: &[RowResult]) -> String {
    let mut rows: Vec<&RowResult> = results.iter().filter(|r| r.outcome.server == server).collect();
    rows.sort_by_key(|r| (r.row.streams_per_client, r.row.watches_per_stream, r.row.clients));
    let (c, done) = coefficients(server, results);
    let mut s = String::new();
    let _ = writeln!(s, "| clients | streams per client | watchers per stream | watchers total | memory usage (RSS) | idle RSS | over idle | fit | fit error | client RSS | setup |");
    let _ = writeln!(s, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let lead = format!(
            "| {} | {} | {} | {} |",
            count(r.row.clients),
            count(r.row.streams_per_client),
            count(r.row.watches_per_stream),
            count(r.row.watches())
        );
        if let Some(why) = &r.outcome.skipped {
            let _ = writeln!(s, "{lead} skipped: {why} | | | | | | |");
            continue;
        }
        let measured = r.outcome.rss_bytes();
        let delta = r.outcome.delta_bytes();
        let (fitted, err) = match (&c, r.complete()) {
            (Some(c), true) => {
                let f = predict(0.0, c, &r.row.terms());
                (mb(f), format!("{:+.0} %", (f - delta) / delta.abs().max(1.0) * 100.0))
            }
            _ => (String::new(), String::new()),
        };
        let memory = match &r.outcome.failed {
            Some(why) => format!(
                "{} (incomplete: {} of {} watches; {why})",
                mb(measured),
                count(r.watches_created),
                count(r.row.watches())
            ),
            None => mb(measured),
        };
        let _ = writeln!(
            s,
            "{lead} {memory} | {} | {} | {fitted} | {err} | {} | {:.1} s |",
            mb(r.outcome.idle_bytes()),
            mb(delta),
            mb(r.client_rss_kb as f64 * 1024.0),
            r.setup_secs
        );
    }
    let _ = writeln!(s);
    match c {
        Some(c) => {
            let _ = writeln!(
                s,
                "{server}: memory over idle ≈ c1·conns + c2·streams + c3·watches with c1 = {} per connection, c2 = {} per stream, c3 = {} per watch (least squares over {} rows, relative error)",
                per_item(c[0]),
                per_item(c[1]),
                per_item(c[2]),
                done
            );
        }
        None => {
            let _ = writeln!(
                s,
                "{server}: no fit: {} complete rows do not vary conns, streams and watches independently (need a row with more than one watch per stream, and rows of different stream counts)",
                done
            );
        }
    }
    let steps = watch_steps(server, results);
    if !steps.is_empty() {
        let _ = writeln!(s, "\nPer watch, between rows of one shape (RSS growth ÷ watches added):\n");
        let _ = writeln!(s, "| clients | streams per client | watchers per stream | per watch |");
        let _ = writeln!(s, "| ---: | ---: | ---: | ---: |");
        for step in steps {
            let _ = writeln!(
                s,
                "| {} | {} | {} → {} | {} |",
                count(step.clients),
                count(step.streams_per_client),
                count(step.from),
                count(step.to),
                per_item(step.per_watch)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(r: Row, idle_mb: f64, c: [f64; 3]) -> RowResult {
        let delta = predict(0.0, &c, &r.terms());
        RowResult {
            outcome: Outcome {
                server: "actcd".to_string(),
                server_rss_idle_kb: (idle_mb * 1e6 / 1024.0) as u64,
                server_rss_kb: ((idle_mb * 1e6 + delta) / 1024.0) as u64,
                ..Outcome::default()
            },
            client_rss_idle_kb: 10_000,
            client_rss_kb: 10_000 + r.clients * 30,
            conns_opened: r.clients,
            streams_opened: r.streams(),
            watches_created: r.watches(),
            setup_secs: r.watches() as f64 / 1e5,
            ..RowResult::skipped(r, String::new(), String::new())
        }
    }

    #[test]
    fn steps_pair_rows_of_one_shape_only() {
        let c = [20e3, 3e3, 80.0];
        let mut results: Vec<_> = ["500x10x1", "500x10x20", "500x10x100", "1kx10x1", "1kx50x10"]
            .iter()
            .flat_map(|r| parse_rows(r).unwrap_or_default())
            .map(|r| done(r, 30.0, c))
            .collect();
        // A second run of the first two rows, 1 MB apart: their means count.
        for (r, extra_mb) in [(row(500, 10, 1), 1.0), (row(500, 10, 20), -1.0)] {
            let mut again = done(r, 30.0, c);
            again.outcome.server_rss_kb =
                (again.outcome.server_rss_kb as f64 + extra_mb * 1e6 / 1024.0) as u64;
            results.push(again);
        }
        let steps = watch_steps("actcd", &results);
        let shapes: Vec<_> = steps.iter().map(|s| (s.clients, s.streams_per_client, s.from, s.to)).collect();
        assert_eq!(shapes, [(500, 10, 1, 20), (500, 10, 20, 100)], "1k x 10 and 1k x 50 have no pair");
        let expected = [80.0 - 1e6 / 95_000.0, 80.0 + 0.5e6 / 400_000.0];
        for (step, want) in steps.iter().zip(expected) {
            assert!((step.per_watch - want).abs() < 1.0, "{step:?}, want {want}");
        }
        assert!(table("actcd", &results).contains("| 500 | 10 | 20 → 100 | 81 B |"));
    }

    #[test]
    fn rows_parse_sets_and_specs() {
        assert_eq!(parse_rows("all").map(|r| r.len()), Ok(15));
        assert_eq!(parse_rows("quick").map(|r| r.len()), Ok(11));
        assert_eq!(parse_rows("quick,big").map(|r| r.len()), Ok(15));
        assert_eq!(parse_rows("small").map(|r| r.len()), Ok(6));
        assert_eq!(
            parse_rows("big"),
            Ok(vec![row(5000, 50, 1), row(5000, 50, 10), row(2000, 50, 100), row(5000, 50, 100)])
        );
        assert_eq!(parse_rows("2kx50x100"), Ok(vec![row(2000, 50, 100)]));
        assert_eq!(parse_rows(" 1000X10x1 , 1kx10x1"), Ok(vec![row(1000, 10, 1)]));
        assert_eq!(parse_rows("2.5kx1x1"), Ok(vec![row(2500, 1, 1)]));
        assert!(parse_rows("1kx10").is_err());
        assert!(parse_rows("0x1x1").is_err());
        assert!(parse_rows("1.5x1x1").is_err());
        assert!(parse_rows("").is_err());
        assert!(parse_rows("lots").is_err());
    }

    #[test]
    fn counts_read_like_etcd() {
        assert_eq!(count(1000), "1k");
        assert_eq!(count(2_500_000), "2.5M");
        assert_eq!(count(10_000_000), "10M");
        assert_eq!(count(50), "50");
        assert_eq!(count(1234), "1234");
        assert_eq!(row(2000, 50, 100).spec(), "2kx50x100");
        assert_eq!(row(2000, 50, 100).watches(), 10_000_000);
    }

    #[test]
    fn fit_recovers_exact_coefficients() {
        let c = [21e3, 2.5e3, 80.0];
        let pts: Vec<_> = ETCD_ROWS.iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        let got = fit(&pts, 1e6).expect("determined");
        for (g, w) in got.iter().zip(c) {
            assert!((g - w).abs() / w < 1e-6, "{got:?}");
        }
        // The small rows alone determine all three.
        let pts: Vec<_> = small_rows().iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        let got = fit(&pts, 1e6).expect("determined");
        assert!((got[2] - 80.0).abs() < 1e-3, "{got:?}");
    }

    #[test]
    fn fit_needs_independent_rows() {
        // One watch per stream everywhere: streams and watches always equal.
        let rows = [row(1000, 1, 1), row(2000, 1, 1), row(1000, 10, 1), row(5000, 50, 1)];
        let pts: Vec<_> = rows.iter().map(|r| (r.terms(), 1e6 * r.clients as f64)).collect();
        assert_eq!(fit(&pts, 1e6), None);
        assert_eq!(fit(&pts[..2], 1e6), None);
    }

    #[test]
    fn fit_weighs_rows_by_relative_error() {
        // Noise of +10 % on a small row moves c1 by about that much, not by a big row's scale.
        let c = [20e3, 3e3, 100.0];
        let mut pts: Vec<_> =
            quick_rows().iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        pts[0].1 *= 1.1;
        let got = fit(&pts, 1e6).expect("determined");
        assert!((got[0] - c[0]).abs() / c[0] < 0.2, "{got:?}");
    }

    #[test]
    fn plan_skips_what_does_not_fit() {
        let machine = Machine { mem_available: 22 << 30, client_fds: 20_000, server_fds: 20_000 };
        let limits = Limits { reserve: 2 << 30, max_secs: 600.0, margin: 1.25, budget: u64::MAX };
        let d = default_models();
        assert!(matches!(plan(&row(1000, 1, 1), &machine, &limits, &d), Verdict::Run { .. }));
        // 25M watches at etcd's 5 KB each: far over 22 GiB.
        let Verdict::Skip(why) = plan(&row(5000, 50, 100), &machine, &limits, &d) else { panic!("runs") };
        assert!(why.contains("GiB"), "{why}");
        let Verdict::Skip(why) = plan(&row(20_000, 1, 1), &machine, &limits, &d) else { panic!("runs") };
        assert!(why.contains("file descriptors"), "{why}");
        // A budget below what the machine has free: 5k connections at etcd's ~110 KB do not fit 1 GiB.
        let budget = Limits { budget: 1 << 30, ..limits };
        assert!(matches!(plan(&row(1000, 1, 1), &machine, &budget, &d), Verdict::Run { .. }));
        let Verdict::Skip(why) = plan(&row(5000, 1, 1), &machine, &budget, &d) else { panic!("runs") };
        assert!(why.contains("1.0 GiB budget"), "{why}");
        // A lean server measured on the quick rows: 25M watches fit.
        let c = [21e3, 3e3, 90.0];
        let results: Vec<_> = quick_rows().iter().map(|r| done(*r, 20.0, c)).collect();
        let m = models_from(&results);
        assert!((m.server.per[2] - 90.0).abs() < 1.0, "{:?}", m.server);
        assert!(m.server.source.contains("11 measured rows"));
        assert!(matches!(plan(&row(5000, 50, 100), &machine, &limits, &m), Verdict::Run { .. }));
        let tight = Limits { max_secs: 10.0, ..limits };
        let Verdict::Skip(why) = plan(&row(5000, 50, 100), &machine, &tight, &m) else { panic!("runs") };
        assert!(why.contains("row limit"), "{why}");
    }

    #[test]
    fn one_watch_rows_estimate_conns_and_streams() {
        let c = [21e3, 3e3, 90.0];
        let ones = [row(1000, 1, 1), row(2000, 1, 1), row(1000, 10, 1), row(2000, 50, 1)];
        let results: Vec<_> = ones.iter().map(|r| done(*r, 20.0, c)).collect();
        let m = models_from(&results);
        assert!((m.server.per[0] - 21e3).abs() < 100.0, "{:?}", m.server);
        assert!((m.server.per[1] - 3090.0).abs() < 10.0, "{:?}", m.server);
        assert_eq!(m.server.per[2], default_models().server.per[2]);
        assert!(m.server.source.contains("per-watch default"), "{}", m.server.source);
        // Too few rows: the defaults.
        assert_eq!(models_from(&results[..1]).server, default_models().server);
    }

    #[test]
    fn table_lists_every_row_with_the_fit() {
        let c = [21e3, 3e3, 90.0];
        let mut results: Vec<_> = quick_rows().iter().map(|r| done(*r, 20.0, c)).collect();
        results.push(RowResult::skipped(
            row(5000, 50, 100),
            "actcd".to_string(),
            "needs ~30 GiB".to_string(),
        ));
        let mut failed = done(row(2000, 50, 10), 20.0, c);
        failed.outcome.failed = Some("stalled".to_string());
        failed.watches_created = 5;
        results.push(failed);
        let t = table("actcd", &results);
        assert!(t.contains("| 5k | 50 | 100 | 25M | skipped: needs ~30 GiB |"), "{t}");
        assert!(t.contains("incomplete: 5 of 1M watches; stalled"), "{t}");
        assert!(
            t.contains("c1 = 21.0 KB per connection, c2 = 3000 B per stream, c3 = 90 B per watch"),
            "{t}"
        );
        assert!(t.contains("over 11 rows"), "{t}");
        // The rows' table, before the per-watch steps that follow it.
        let rows_table = t.split("\nPer watch").next().unwrap_or_default();
        assert_eq!(rows_table.lines().filter(|l| l.starts_with("| ")).count(), 2 + quick_rows().len() + 2);
        assert!(table("etcd", &results).contains("no fit"));
    }

    #[test]
    fn side_by_side_has_ratios() {
        let mut results: Vec<_> = quick_rows().iter().map(|r| done(*r, 20.0, [21e3, 3e3, 90.0])).collect();
        for r in quick_rows() {
            let mut e = done(r, 20.0, [105e3, 45e3, 1500.0]);
            e.outcome.server = "etcd".to_string();
            results.push(e);
        }
        let t = side_by_side("etcd", "actcd", &results);
        assert!(t.contains("| c1, per connection | 105.0 KB | 21.0 KB | 0.20 |"), "{t}");
        assert!(t.contains("| c3, per watch | 1500 B | 90 B | 0.06 |"), "{t}");
        assert_eq!(
            t.lines().filter(|l| ["| 1k", "| 2k", "| 5k"].iter().any(|p| l.starts_with(p))).count(),
            quick_rows().len()
        );
    }

    #[test]
    fn results_load_from_documents() {
        let dir = std::env::temp_dir().join(format!("actcd-tables-memtable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let r = done(row(1000, 1, 1), 20.0, [21e3, 3e3, 90.0]);
        let doc = serde_json::json!({"command": "watch-memory", "extra": {"row": r}});
        let a = dir.join("a.json");
        std::fs::write(&a, doc.to_string()).expect("write");
        let b = dir.join("b.json");
        std::fs::write(&b, "{not json").expect("write");
        let c = dir.join("c.json");
        std::fs::write(&c, "{\"command\": \"put\"}").expect("write");
        let m = done(row(500, 10, 20), 20.0, [21e3, 3e3, 90.0]);
        let measured = dir.join("measure.json");
        std::fs::write(&measured, serde_json::json!({"server": "actcd", "watch": [r, m]}).to_string())
            .expect("write");
        let (rows, problems) = load_results(&[a, b, c, measured, dir.join("missing.json")]);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(rows, vec![r.clone(), r, m], "a watch-memory row, then a measure run's two");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
