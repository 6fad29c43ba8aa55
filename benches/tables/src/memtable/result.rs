//! What a row measured, as the JSON documents of `watch-memory` and `measure` record it.

use serde::{Deserialize, Serialize};

use super::Row;
use crate::outcome::Outcome;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::{row, test_support::done};

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
