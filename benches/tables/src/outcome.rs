//! What every memory row records about the server it measured: which server, whether the row
//! ran (or why not, or why it stopped short), and the server's resident memory before and after
//! the row, read from `/proc/PID/status` as etcd's benchmarks read it, from outside.

use actcd_test_support::procfs::{self, Proc};
use serde::{Deserialize, Serialize};

/// A memory row's outcome on the server (the JSON keeps these fields at the row's top level).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    /// The server's name (actcd, etcd, or the process name of a given pid), empty when unknown.
    pub server: String,
    /// Why the row did not run (too big for the machine), if it did not.
    pub skipped: Option<String>,
    /// Why the row stopped short, if it did.
    pub failed: Option<String>,
    /// Server VmRSS before the row, KiB.
    pub server_rss_idle_kb: u64,
    /// Server VmRSS at the end of the row, after the settle time, KiB.
    pub server_rss_kb: u64,
    /// Server VmHWM (peak RSS) then, KiB.
    pub server_hwm_kb: u64,
}

impl Outcome {
    /// A row that did not run, and why.
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
            Ok(m) => {
                self.server_rss_kb = m.rss_kb;
                self.server_hwm_kb = m.hwm_kb;
            }
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

    /// Server RSS at the end, bytes.
    pub fn rss_bytes(&self) -> f64 {
        self.server_rss_kb as f64 * 1024.0
    }

    /// Server RSS before the row, bytes.
    pub fn idle_bytes(&self) -> f64 {
        self.server_rss_idle_kb as f64 * 1024.0
    }

    /// Server bytes over idle.
    pub fn delta_bytes(&self) -> f64 {
        self.rss_bytes() - self.idle_bytes()
    }
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
        let r = Row {
            n: 1,
            outcome: Outcome { server_rss_kb: 5, ..Outcome::skipped("etcd".into(), "no".into()) },
        };
        let v = serde_json::to_value(&r).expect("encodes");
        assert_eq!(v["server"], "etcd");
        assert_eq!(v["server_rss_kb"], 5);
        let back: Row = serde_json::from_value(v).expect("decodes");
        assert_eq!(back.outcome.skipped.as_deref(), Some("no"));
    }
}
