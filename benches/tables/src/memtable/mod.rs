//! etcd's watch-memory table: rows of clients × streams per client × watches per stream and
//! what each measured, what a row needs from the machine (file descriptors, memory, time) and
//! whether it fits, the least-squares fit of `memory ≈ c1·conns + c2·streams + c3·watches`, and
//! the table in etcd's layout with the fit under it.
//!
//! A row is measured on a fresh server (see `watch_row`); its result is one JSON document. The
//! plan and the table are computed from such documents, so a driver that restarts the server
//! per row (`benches/watch-memory`) needs no arithmetic of its own.

mod plan;
mod table;

pub use plan::{
    default_models, machine, memory_room, models_from, plan, Limits, Machine, Model, Models, Verdict,
};
pub use table::{coefficients, side_by_side, table, watch_steps, WatchStep};

use crate::outcome::{memory_row, parse_rows as parse_rows_of, Outcome};
use actcd_bench::format::count;
use serde::{Deserialize, Serialize};

/// One row: clients (one HTTP/2 connection each) × watch streams on each × watches per stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub clients: u64,
    pub streams_per_client: u64,
    pub watches_per_stream: u64,
}

pub(crate) const fn row(clients: u64, streams_per_client: u64, watches_per_stream: u64) -> Row {
    Row { clients, streams_per_client, watches_per_stream }
}

/// etcd's 15 rows, in the order of its table.
#[rustfmt::skip]
pub const ETCD_ROWS: [Row; 15] = [
    row(1000, 1, 1), row(2000, 1, 1), row(5000, 1, 1),
    row(1000, 10, 1), row(2000, 10, 1), row(5000, 10, 1),
    row(1000, 50, 1), row(2000, 50, 1), row(5000, 50, 1),
    row(1000, 50, 10), row(2000, 50, 10), row(5000, 50, 10),
    row(1000, 50, 100), row(2000, 50, 100), row(5000, 50, 100),
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
    let small = |r: &Row| r.clients <= 2000 && r.streams() <= 50_000 && r.watches() <= 500_000;
    ETCD_ROWS.iter().copied().filter(small).collect()
}

impl Row {
    pub fn streams(&self) -> u64 {
        self.clients * self.streams_per_client
    }

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

/// Parses `--rows`: `all` (etcd's 15 rows), `quick`, `small`, `big` (etcd's rows not in quick),
/// or a comma-separated list of `CLIENTSxSTREAMSxWATCHES` (counts may use k and M: `2kx50x100`).
/// Sets and rows mix: `quick,2kx50x100`. Duplicates are dropped.
pub fn parse_rows(spec: &str) -> Result<Vec<Row>, String> {
    let set = |name: &str| match name {
        "all" => Some(ETCD_ROWS.to_vec()),
        "quick" => Some(quick_rows()),
        "small" => Some(small_rows()),
        "big" => Some(ETCD_ROWS.iter().filter(|r| !quick_rows().contains(r)).copied().collect()),
        _ => None,
    };
    let usage = "CLIENTSxSTREAMSxWATCHES (like 1kx10x100), or all, quick, small, big";
    parse_rows_of(spec, ("row", 3, usage), set, |n| Ok(row(n[0], n[1], n[2])))
}

/// What a row measured (or why it did not run), the `row` figure of a `watch-memory` JSON
/// document: this client's VmRSS before connecting and with every watch created (KiB), the
/// connections dialed, streams opened, watches whose created response arrived, and the seconds
/// from the first dial to the last created response.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RowResult {
    pub row: Row,
    /// The server, whether the row ran, its RSS with every watch created.
    #[serde(flatten)]
    pub outcome: Outcome,
    pub client_rss_idle_kb: u64,
    pub client_rss_kb: u64,
    pub conns_opened: u64,
    pub streams_opened: u64,
    pub watches_created: u64,
    pub setup_secs: f64,
}

memory_row!(RowResult, Row);

impl RowResult {
    /// Whether the row ran to the end: every watch created and the RSS read.
    pub fn complete(&self) -> bool {
        self.outcome.ran() && self.watches_created == self.row.watches()
    }

    pub fn client_delta_bytes(&self) -> f64 {
        (self.client_rss_kb as f64 - self.client_rss_idle_kb as f64) * 1024.0
    }
}

/// Reads the `row` figure of each `watch-memory` JSON document and the `watch` rows of each
/// `measure` document (a document with neither, such as another command's, is passed over).
/// Returns the rows and, per unreadable file or row, why.
pub fn load_results(paths: &[std::path::PathBuf]) -> (Vec<RowResult>, Vec<String>) {
    let (mut rows, mut problems) = (Vec::new(), Vec::new());
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| e.to_string());
        match text.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).map_err(|e| e.to_string())) {
            Ok(doc) => {
                let single = doc.get("extra").and_then(|e| e.get("row")).into_iter();
                let measured = doc.get("watch").and_then(|w| w.as_array()).into_iter().flatten();
                for r in single.chain(measured) {
                    match RowResult::deserialize(r) {
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

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::fit::predict;

    /// A complete row of actcd whose RSS over idle is exactly `c·terms`.
    pub(crate) fn done(r: Row, idle_mb: f64, c: [f64; 3]) -> RowResult {
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
            row: r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::done;
    use super::*;

    #[test]
    fn rows_parse_sets_and_specs() {
        assert_eq!(parse_rows("all").map(|r| r.len()), Ok(15));
        assert_eq!(parse_rows("quick").map(|r| r.len()), Ok(11));
        assert_eq!(parse_rows("quick,big").map(|r| r.len()), Ok(15));
        assert_eq!(parse_rows("small").map(|r| r.len()), Ok(6));
        let big = vec![row(5000, 50, 1), row(5000, 50, 10), row(2000, 50, 100), row(5000, 50, 100)];
        assert_eq!(parse_rows("big"), Ok(big));
        assert_eq!(parse_rows("2kx50x100"), Ok(vec![row(2000, 50, 100)]));
        assert_eq!(parse_rows(" 1000X10x1 , 1kx10x1"), Ok(vec![row(1000, 10, 1)]));
        assert_eq!(parse_rows("2.5kx1x1"), Ok(vec![row(2500, 1, 1)]));
        for bad in ["1kx10", "0x1x1", "1.5x1x1", "", "lots"] {
            assert!(parse_rows(bad).is_err(), "{bad}");
        }
        assert_eq!(row(2000, 50, 100).spec(), "2kx50x100");
        assert_eq!(row(2000, 50, 100).watches(), 10_000_000);
    }

    #[test]
    fn results_load_from_documents() {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            p
        };
        let (r, m) =
            (done(row(1000, 1, 1), 20.0, [21e3, 3e3, 90.0]), done(row(500, 10, 20), 20.0, [21e3, 3e3, 90.0]));
        let paths = [
            write("a.json", serde_json::json!({"command": "watch-memory", "extra": {"row": r}}).to_string()),
            write("b.json", "{not json".to_string()),
            write("c.json", "{\"command\": \"put\"}".to_string()),
            write("measure.json", serde_json::json!({"server": "actcd", "watch": [r, m]}).to_string()),
            dir.path().join("missing.json"),
        ];
        let (rows, problems) = load_results(&paths);
        assert_eq!(rows, vec![r.clone(), r, m], "a watch-memory row, then a measure run's two");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
