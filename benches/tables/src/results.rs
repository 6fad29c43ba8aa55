//! Where a run's files go and what they are called: `--out`, else
//! `$ACTCD_BENCH_RESULTS/<UTC date>/`, else `~/actcd-bench-results/<UTC date>/`, each file
//! prefixed with the run's UTC time.

use clap::Args;
use jiff::Timestamp;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `--out`, as measure, compare and fanout take it.
#[derive(Debug, Clone, Args)]
pub struct Files {
    /// Where the tables, JSON and charts go (default $ACTCD_BENCH_RESULTS/<UTC date>, or
    /// ~/actcd-bench-results/<UTC date> when that is not set).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A moment in UTC in the three forms results use: the folder (`2026-11-30`), the prefix of a
/// run's files (`2026-11-30T05-10-00Z`) and a summary's first line (`2026-11-30 05:10 UTC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Utc {
    pub date: String,
    pub stamp: String,
    pub line: String,
}

impl Utc {
    pub fn now() -> Self {
        Self::at(Timestamp::now())
    }

    pub fn at(t: Timestamp) -> Self {
        Self {
            date: t.strftime("%Y-%m-%d").to_string(),
            stamp: t.strftime("%Y-%m-%dT%H-%M-%SZ").to_string(),
            line: t.strftime("%Y-%m-%d %H:%M UTC").to_string(),
        }
    }
}

const RESULTS_DIR_NAME: &str = "actcd-bench-results";

/// Where results go without `--out`: `$ACTCD_BENCH_RESULTS`, else `~/actcd-bench-results`, so
/// that a run started from a clone never writes into its source tree. Without either variable,
/// `actcd-bench-results` in the current directory.
fn results_root(configured: Option<OsString>, home: Option<OsString>) -> PathBuf {
    match (configured.filter(|d| !d.is_empty()), home.filter(|h| !h.is_empty())) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(home)) => PathBuf::from(home).join(RESULTS_DIR_NAME),
        (None, None) => PathBuf::from(RESULTS_DIR_NAME),
    }
}

impl Files {
    /// The folder of a run at `now`: `--out`, else the results root's `<UTC date>` folder.
    pub fn dir(&self, now: &Utc) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            results_root(std::env::var_os("ACTCD_BENCH_RESULTS"), std::env::var_os("HOME")).join(&now.date)
        })
    }
}

/// Writes `files` (name suffix, bytes) as `<dir>/<prefix>-<suffix>`; returns the paths.
pub fn write_all(dir: &Path, prefix: &str, files: &[(String, Vec<u8>)]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for (suffix, bytes) in files {
        let p = dir.join(format!("{prefix}-{suffix}"));
        std::fs::write(&p, bytes).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        paths.push(p);
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        let at = |secs: i64| Utc::at(Timestamp::from_second(secs).expect("in range"));
        assert_eq!(at(0).stamp, "1970-01-01T00-00-00Z");
        // 2000-02-29 12:34:56, a leap day of a 400-year leap year.
        assert_eq!(at(951_827_696).line, "2000-02-29 12:34 UTC");
        // 2026-11-30 04:06:27.
        let u = at(1_796_011_587);
        assert_eq!((u.date.as_str(), u.stamp.as_str()), ("2026-11-30", "2026-11-30T04-06-27Z"));
    }

    #[test]
    fn results_default_outside_the_source_tree() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(results_root(os("/data/runs"), os("/home/u")), PathBuf::from("/data/runs"));
        assert_eq!(results_root(None, os("/home/u")), PathBuf::from("/home/u/actcd-bench-results"));
        assert_eq!(results_root(os(""), os("/home/u")), PathBuf::from("/home/u/actcd-bench-results"));
        assert_eq!(results_root(None, None), PathBuf::from("actcd-bench-results"));
        let given = Files { out: Some(PathBuf::from("/tmp/x")) };
        assert_eq!(given.dir(&Utc::at(Timestamp::UNIX_EPOCH)), PathBuf::from("/tmp/x"));
    }
}
