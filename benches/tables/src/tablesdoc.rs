//! The result of one `measure` run (the JSON file) and what is made of it: the tables in etcd's
//! layout, the PNG charts, and `actcd-tables compare BASE OTHER`: two runs side by side with
//! the ratios OTHER / BASE, printed and written with charts of both (it measures nothing).

use crate::chart::{self, Series};
use crate::memtable::{self, RowResult};
use crate::qpstable::{self, QpsResult, QpsRun};
use crate::results::{write_all, Files, Utc};
use crate::storetable::{self, StoreResult, StoreRow};
use actcd_bench::format::{count, mb, table_head};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One run of `measure`, as its JSON file holds it: the server measured (actcd, etcd), its
/// version line, when the run started (UTC), the machine, the command line, how servers were
/// provided, the rows and runs of each table, and the run's wall time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TablesDoc {
    pub server: String,
    pub server_version: String,
    pub date: String,
    pub machine: String,
    pub command: String,
    pub mode: String,
    pub storage: Vec<StoreResult>,
    pub watch: Vec<RowResult>,
    pub qps: Vec<QpsResult>,
    pub total_secs: f64,
}

#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The base run's JSON file (the ratios are OTHER / BASE).
    pub base: PathBuf,
    /// The other run's JSON file.
    pub other: PathBuf,
    #[command(flatten)]
    pub files: Files,
}

impl CompareArgs {
    /// Prints the side-by-side tables and writes them with charts of both runs; the exit code.
    pub fn run(&self) -> i32 {
        let load = |p: &Path| {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str::<TablesDoc>(&text)
                .map_err(|e| format!("{} is not a tables JSON file: {e}", p.display()))
        };
        let written = load(&self.base).and_then(|base| {
            let (other, now) = (load(&self.other)?, Utc::now());
            let text = side_by_side(&base, &other);
            println!("{text}");
            let prefix = format!("{}-{}-vs-{}", now.stamp, base.server, other.server);
            files(&self.files.dir(&now), &prefix, ("compare.md", text), &[&base, &other])
        });
        match written {
            Ok(paths) => paths.iter().for_each(|p| eprintln!("tables: wrote {}", p.display())),
            Err(e) => {
                eprintln!("actcd-tables compare: {e}");
                return 1;
            }
        }
        0
    }
}

impl TablesDoc {
    /// Rows and runs that started but did not complete (skipped ones are not counted).
    pub fn incomplete(&self) -> usize {
        self.storage.iter().filter(|r| r.outcome.skipped.is_none() && !r.complete()).count()
            + self.watch.iter().filter(|r| r.outcome.skipped.is_none() && !r.complete()).count()
            + self.qps.iter().filter(|r| r.failed.is_some()).count()
    }
}

/// The tables of one run, in etcd's layout, with a header naming server, date and machine.
pub fn text(doc: &TablesDoc) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} ({}), {}; {}", doc.server, doc.server_version, doc.date, doc.machine);
    let _ = writeln!(s, "{}", doc.mode);
    let _ = writeln!(s, "command: {}", doc.command);
    if !doc.storage.is_empty() {
        let _ = writeln!(
            s,
            "\nStorage memory (etcd's \"overall memory usage\" table: server RSS after the load):\n"
        );
        s += &storetable::table(&doc.server, &doc.storage);
    }
    if !doc.watch.is_empty() {
        let _ =
            writeln!(s, "\nWatch memory (etcd's watch-memory table: server RSS with every watch created):\n");
        s += &memtable::table(&doc.server, &doc.watch);
    }
    if !doc.qps.is_empty() {
        let _ =
            writeln!(s, "\nPut/range QPS (etcd's performance doc; client and server share the machine):\n");
        s += &qpstable::table(&doc.server, &doc.qps);
    }
    let _ = writeln!(s, "\ntotal time {:.0} s", doc.total_secs);
    s
}

/// The charts of one or more runs (one series per run): storage memory per row, memory against
/// watches, QPS per run. Only tables some run has rows for are drawn.
pub fn charts(docs: &[&TablesDoc]) -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    let mut charts = Vec::new();
    let title = "STORAGE MEMORY: RSS AFTER N KEYS X VERSIONS X KEY X VALUE";
    let storage = |d: &TablesDoc| {
        d.storage.iter().map(|r| (r.row, r.complete().then(|| r.outcome.rss_bytes() / 1e6))).collect()
    };
    if let Some(png) = bar_chart(docs, storage, StoreRow::spec, (title, "RSS, MB"))? {
        charts.push(("storage-memory", png));
    }
    if docs.iter().any(|d| !d.watch.is_empty()) {
        let points = |d: &TablesDoc| {
            let done = d.watch.iter().filter(|r| r.complete());
            done.map(|r| (r.row.watches() as f64, r.outcome.rss_bytes() / 1e6)).collect()
        };
        let series: Vec<_> =
            docs.iter().map(|d| Series { name: d.server.clone(), values: points(d) }).collect();
        let title = "WATCH MEMORY: RSS AGAINST WATCHES";
        charts.push(("watch-memory", chart::lines(title, "watches (log scale)", "RSS, MB", &series)?));
    }
    let qps = |d: &TablesDoc| d.qps.iter().map(|r| (r.run, r.failed.is_none().then_some(r.qps))).collect();
    if let Some(png) = bar_chart(docs, qps, QpsRun::name, ("PUT/RANGE QPS (CONNS X CLIENTS)", "requests/s"))?
    {
        charts.push(("qps", png));
    }
    Ok(charts)
}

/// Bars of every run's values (`of` gives a run's rows and their values, `None` for a row not
/// complete), one group per row any run has; `None` when no run has one.
fn bar_chart<K: PartialEq + Copy>(
    docs: &[&TablesDoc],
    of: impl Fn(&TablesDoc) -> Vec<(K, Option<f64>)>,
    name: impl Fn(&K) -> String,
    (title, unit): (&str, &str),
) -> Result<Option<Vec<u8>>, String> {
    let mut keys: Vec<K> = Vec::new();
    docs.iter().flat_map(|d| of(d)).for_each(|(k, _)| {
        if !keys.contains(&k) {
            keys.push(k)
        }
    });
    if keys.is_empty() {
        return Ok(None);
    }
    let series: Vec<_> = docs
        .iter()
        .map(|d| {
            let values = of(d);
            let value = |k: &K| values.iter().find(|(j, v)| j == k && v.is_some()).and_then(|(_, v)| *v);
            Series { name: d.server.clone(), values: keys.iter().map(value).collect() }
        })
        .collect();
    let cats: Vec<String> = keys.iter().map(name).collect();
    chart::bars(title, unit, &cats, &series).map(Some)
}

fn ratio(other: f64, base: f64) -> String {
    if base > 0.0 && other > 0.0 {
        format!("{:.2}", other / base)
    } else {
        "—".to_string()
    }
}

/// Two runs side by side: per table the rows both measured, with OTHER / BASE.
pub fn side_by_side(base: &TablesDoc, other: &TablesDoc) -> String {
    let (b, o) = (&base.server, &other.server);
    let mut s = String::new();
    let _ = writeln!(s, "{b}: {} ({}), {}", base.server_version, base.date, base.machine);
    let _ = writeln!(s, "{o}: {} ({}), {}", other.server_version, other.date, other.machine);
    if !base.storage.is_empty() || !other.storage.is_empty() {
        let _ = writeln!(s, "\nStorage memory (server RSS after the load):\n");
        s += &table_head(&format!("N | versions | key size | value size | {b} RSS | {o} RSS | {o}/{b}"));
        for rb in &base.storage {
            let ro = other.storage.iter().find(|r| r.row == rb.row);
            let show = |r: Option<&StoreResult>| match r {
                Some(r) if r.complete() => mb(r.outcome.rss_bytes()),
                Some(r) => match &r.outcome.skipped {
                    Some(why) => format!("skipped: {why}"),
                    None => format!("incomplete: {}", r.outcome.failed.clone().unwrap_or_default()),
                },
                None => "not run".to_string(),
            };
            let both = match ro {
                Some(ro) if rb.complete() && ro.complete() => {
                    ratio(ro.outcome.rss_bytes(), rb.outcome.rss_bytes())
                }
                _ => "—".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {both} |",
                count(rb.row.keys).to_uppercase(),
                rb.row.versions,
                rb.row.key_size,
                rb.row.val_size,
                show(Some(rb)),
                show(ro)
            );
        }
    }
    if !base.watch.is_empty() && !other.watch.is_empty() {
        let _ = writeln!(s, "\nWatch memory (server RSS with every watch created):\n");
        let all: Vec<RowResult> = base.watch.iter().chain(&other.watch).cloned().collect();
        s += &memtable::side_by_side(b, o, &all);
        for r in base.watch.iter().chain(&other.watch).filter(|r| r.outcome.skipped.is_some()) {
            let _ = writeln!(
                s,
                "\n{} {}: skipped: {}",
                r.outcome.server,
                r.row.spec(),
                r.outcome.skipped.clone().unwrap_or_default()
            );
        }
    }
    if !base.qps.is_empty() && !other.qps.is_empty() {
        let _ = writeln!(s, "\nPut/range QPS:\n");
        s += &table_head(&format!("run (conns x clients) | requests | {b} QPS | {o} QPS | {o}/{b} | {b} avg | {o} avg | {b} p99 | {o} p99 | client cores ({b} / {o})"));
        for rb in &base.qps {
            let Some(ro) = other.qps.iter().find(|r| r.run == rb.run) else { continue };
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} / {:.2} |",
                rb.run.name(),
                count(rb.run.total),
                rb.qps,
                ro.qps,
                ratio(ro.qps, rb.qps),
                rb.average_secs * 1e3,
                ro.average_secs * 1e3,
                rb.p99_secs * 1e3,
                ro.p99_secs * 1e3,
                rb.client_cores,
                ro.client_cores
            );
        }
    }
    s
}

/// Writes a run's JSON, its tables (`text`) and its charts as `<dir>/<prefix>-<what>`.
pub fn save(dir: &Path, prefix: &str, doc: &TablesDoc, text: &str) -> Result<Vec<PathBuf>, String> {
    let json = serde_json::to_string_pretty(doc).map_err(|e| format!("cannot encode the tables: {e}"))?;
    let mut paths = write_all(dir, prefix, &[("tables.json".to_string(), json.into_bytes())])?;
    paths.extend(files(dir, prefix, ("tables.md", text.to_string()), &[doc])?);
    Ok(paths)
}

/// Writes `text` as `<dir>/<prefix>-<name>` and the charts of `docs` beside it.
fn files(
    dir: &Path,
    prefix: &str,
    (name, text): (&str, String),
    docs: &[&TablesDoc],
) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![(name.to_string(), text.into_bytes())];
    files.extend(charts(docs)?.into_iter().map(|(suffix, png)| (format!("{suffix}.png"), png)));
    write_all(dir, prefix, &files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{MemoryRow, Outcome};

    /// A run of `server` with the quick storage rows' first (RSS 100 MB × `scale`) and second
    /// (skipped), and every QPS run (1000 × `scale` a second).
    fn doc(server: &str, scale: f64) -> TablesDoc {
        // 2000 keys of one version: idle 20,000 KiB plus the rest.
        let mut stored =
            storetable::tests::done(storetable::QUICK_ROWS[0], (100e3 * scale - 20e3) * 1024.0 / 2000.0, 0.0);
        stored.outcome.server = server.to_string();
        let qps =
            qpstable::runs(10, 100).into_iter().map(|run| qpstable::tests::done(run, server, 1000.0 * scale));
        TablesDoc {
            server: server.to_string(),
            server_version: "v".to_string(),
            date: "d".to_string(),
            machine: "m".to_string(),
            command: "c".to_string(),
            mode: "m".to_string(),
            storage: vec![
                stored,
                StoreResult::new(
                    storetable::QUICK_ROWS[1],
                    Outcome::skipped(server.to_string(), "too big".to_string()),
                ),
            ],
            watch: Vec::new(),
            qps: qps.collect(),
            total_secs: 1.0,
        }
    }

    #[test]
    fn side_by_side_has_ratios_and_skips() {
        let (e, a) = (doc("etcd", 2.0), doc("actcd", 1.0));
        let t = side_by_side(&e, &a);
        assert!(t.contains("| 2K | 1 | 64 | 256 | 205 MB | 102 MB | 0.50 |"), "{t}");
        assert!(t.contains("skipped: too big"), "{t}");
        assert!(t.contains("| put-100x1000 | 100 | 2000 | 1000 | 0.50 |"), "{t}");
        let c = charts(&[&e, &a]).expect("draws");
        assert_eq!(c.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec!["storage-memory", "qps"]);
        assert!(text(&a).contains("Put/range QPS"));
    }
}
