//! `actcd-tables compare BASE OTHER`: two `measure` runs (their JSON files) side by side with
//! the ratios OTHER / BASE, printed and written with charts of both. Measures nothing.

use crate::measure::out_dir;
use crate::stamp::Utc;
use crate::tablesdoc::{self, TablesDoc};
use clap::Args;
use std::path::{Path, PathBuf};

/// `compare`'s flags.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The base run's JSON file (the ratios are OTHER / BASE).
    pub base: PathBuf,
    /// The other run's JSON file.
    pub other: PathBuf,
    /// Where the side-by-side table and the charts go (default $ACTCD_BENCH_RESULTS/<UTC date>,
    /// or ~/actcd-bench-results/<UTC date> when that is not set).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn load(p: &Path) -> Result<TablesDoc, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a tables JSON file: {e}", p.display()))
}

impl CompareArgs {
    /// Prints the side-by-side tables and writes them with charts of both runs. Returns the
    /// exit code.
    pub fn run(&self) -> i32 {
        match self.write() {
            Ok(paths) => {
                for p in paths {
                    eprintln!("tables: wrote {}", p.display());
                }
                0
            }
            Err(e) => {
                eprintln!("actcd-tables compare: {e}");
                1
            }
        }
    }

    fn write(&self) -> Result<Vec<PathBuf>, String> {
        let docs = [load(&self.base)?, load(&self.other)?];
        let now = Utc::now();
        let text = tablesdoc::side_by_side(&docs[0], &docs[1]);
        println!("{text}");
        let mut files = vec![("compare.md".to_string(), text.into_bytes())];
        let charts = tablesdoc::charts(&[&docs[0], &docs[1]])?;
        files.extend(charts.into_iter().map(|(suffix, png)| (format!("{suffix}.png"), png)));
        let prefix = format!("{}-{}-vs-{}", now.stamp, docs[0].server, docs[1].server);
        tablesdoc::write_all(&out_dir(self.out.as_deref(), &now), &prefix, &files)
    }
}
