//! What every memory row records about the server it measured: which server, whether the row
//! ran (or why not, or why it stopped short), and the server's resident memory before and after
//! the row, read from `/proc/PID/status` as etcd's benchmarks read it, from outside; and what
//! the memory tables' rows share: their `--rows` lists, and a result per row.

use actcd_bench::format::parse_count;
use actcd_test_support::procfs::{self, Proc};
use serde::{Deserialize, Serialize};

/// A memory row's outcome on the server (the JSON keeps these fields at the row's top level):
/// the server's name (empty when unknown), why the row did not run or stopped short, and the
/// server's VmRSS before the row and after it (after the settle time) and its VmHWM then, KiB.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub server: String,
    pub skipped: Option<String>,
    pub failed: Option<String>,
    pub server_rss_idle_kb: u64,
    pub server_rss_kb: u64,
    pub server_hwm_kb: u64,
}

impl Outcome {
    pub fn skipped(server: String, reason: String) -> Self {
        Self { server, skipped: Some(reason), ..Self::default() }
    }

    /// A row starting on the server `pid`: its idle RSS, read now (failed when unreadable).
    pub fn start(server: String, pid: u32) -> Self {
        let mut o = Self { server, ..Self::default() };
        match procfs::memory(Proc::Pid(pid)) {
            Ok(m) => o.server_rss_idle_kb = m.rss_kb,
            Err(e) => o.fail(format!("the server's memory is not readable: {e}")),
        }
        o
    }

    /// Reads the server's RSS at the end of the row (failed when unreadable: did it die?).
    pub fn finish(&mut self, pid: u32) {
        match procfs::memory(Proc::Pid(pid)) {
            Ok(m) => (self.server_rss_kb, self.server_hwm_kb) = (m.rss_kb, m.hwm_kb),
            Err(e) => {
                self.fail(format!("the server's memory is not readable after the row (did it die?): {e}"))
            }
        }
    }

    /// Marks the row as stopped short; the first reason is kept.
    pub fn fail(&mut self, why: impl Into<String>) {
        self.failed.get_or_insert_with(|| why.into());
    }

    /// Whether the row ran and both RSS readings were taken.
    pub fn ran(&self) -> bool {
        self.skipped.is_none() && self.failed.is_none() && self.server_rss_kb > 0
    }

    pub fn rss_bytes(&self) -> f64 {
        self.server_rss_kb as f64 * 1024.0
    }

    pub fn idle_bytes(&self) -> f64 {
        self.server_rss_idle_kb as f64 * 1024.0
    }

    pub fn delta_bytes(&self) -> f64 {
        self.rss_bytes() - self.idle_bytes()
    }
}

pub trait MemoryRow {
    type Row: Copy;
    /// A row with `outcome` and nothing measured yet.
    fn new(row: Self::Row, outcome: Outcome) -> Self;
    /// The row as its `--rows` flag takes it.
    fn spec(row: &Self::Row) -> String;
    fn outcome(&mut self) -> &mut Outcome;
}

/// [`MemoryRow`] for a result of `row` and `outcome` fields and figures that start at 0.
macro_rules! memory_row {
    ($result:ty, $row:ty) => {
        impl $crate::outcome::MemoryRow for $result {
            type Row = $row;

            fn new(row: $row, outcome: $crate::outcome::Outcome) -> Self {
                Self { row, outcome, ..Self::default() }
            }

            fn spec(row: &$row) -> String {
                row.spec()
            }

            fn outcome(&mut self) -> &mut $crate::outcome::Outcome {
                &mut self.outcome
            }
        }
    };
}
pub(crate) use memory_row;

/// Parses a comma-separated list of rows, in order and each once: names of sets (`set`) and
/// `AxBx…` rows of `fields` counts that may use k and M (`row`). `what` and `usage` name them
/// in errors.
pub fn parse_rows<R: PartialEq>(
    spec: &str,
    (what, fields, usage): (&str, usize, &str),
    set: impl Fn(&str) -> Option<Vec<R>>,
    row: impl Fn(&[u64]) -> Result<R, String>,
) -> Result<Vec<R>, String> {
    let mut rows: Vec<R> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add = match set(part) {
            Some(add) => add,
            None => {
                let counts = part.split(['x', 'X', '*']).map(parse_count);
                if counts.clone().count() != fields {
                    return Err(format!("{what} {part:?}: expected {usage}"));
                }
                vec![row(&counts.collect::<Result<Vec<u64>, _>>()?)?]
            }
        };
        for r in add {
            if !rows.contains(&r) {
                rows.push(r);
            }
        }
    }
    if rows.is_empty() {
        return Err(format!("no {what}s given"));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_live_process_and_fails_on_a_missing_one() {
        let me = std::process::id();
        let mut o = Outcome::start("me".to_string(), me);
        assert!(o.server_rss_idle_kb > 0 && o.failed.is_none());
        o.finish(me);
        assert!(o.ran() && o.server_hwm_kb >= o.server_rss_kb);
        let mut gone = Outcome::start("gone".to_string(), u32::MAX);
        assert!(gone.failed.as_deref().is_some_and(|f| f.contains("not readable")));
        gone.fail("second reason");
        assert!(!gone.failed.as_deref().unwrap_or_default().contains("second"));
        assert!(!Outcome::skipped("x".to_string(), "too big".to_string()).ran());
    }

    #[test]
    fn json_keeps_the_fields_flat() {
        #[derive(Serialize, Deserialize)]
        struct Row {
            n: u32,
            #[serde(flatten)]
            outcome: Outcome,
        }
        let outcome = Outcome { server_rss_kb: 5, ..Outcome::skipped("etcd".into(), "no".into()) };
        let v = serde_json::to_value(Row { n: 1, outcome }).expect("encodes");
        assert_eq!((v["server"].as_str(), v["server_rss_kb"].as_u64()), (Some("etcd"), Some(5)));
        let back: Row = serde_json::from_value(v).expect("decodes");
        assert_eq!(back.outcome.skipped.as_deref(), Some("no"));
    }
}
