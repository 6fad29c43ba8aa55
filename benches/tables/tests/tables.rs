//! `actcd-tables measure --quick` end to end: it starts actcd itself (a fresh server per memory
//! row), measures every table from its own process, prints them, and writes the JSON and the
//! PNG charts. Needs the actcd binary next to actcd-tables (`cargo test --workspace` builds it).

use actcd_tables::memtable;
use actcd_tables::tablesdoc::TablesDoc;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The quick run takes about 20 s on the shared 2-core machine.
const BOUND: Duration = Duration::from_secs(240);

fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the results dir exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn quick_tables_measure_real_rss_and_write_json_and_charts() {
    let bench = Path::new(env!("CARGO_BIN_EXE_actcd-tables"));
    let actcd = bench.with_file_name("actcd");
    assert!(actcd.is_file(), "{} is missing: cargo build --release -p actcd", actcd.display());
    let out = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(bench)
        .args(["measure", "--server", "actcd", "--quick", "--settle", "1s"])
        .arg("--out")
        .arg(out.path())
        .arg("--work-dir")
        .arg(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("actcd-tables starts");
    let started = Instant::now();
    while child.try_wait().expect("waitable").is_none() {
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("measure --quick did not finish within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "exit {:?}\n{stdout}\n{stderr}", output.status);
    eprintln!("measure --quick took {:.1} s", started.elapsed().as_secs_f64());

    // The tables in etcd's layout, with numbers in them.
    for heading in ["Storage memory", "Watch memory", "Writes (8-byte", "Reads (one key"] {
        assert!(stdout.contains(heading), "no {heading:?} in\n{stdout}");
    }
    let storage_row =
        stdout.lines().find(|l| l.starts_with("| 2K | 5 | 64bytes | 256bytes | ")).expect("the 2K x 5 row");
    let rss_mb: f64 = storage_row
        .split('|')
        .nth(5)
        .and_then(|c| c.trim().strip_suffix(" MB"))
        .and_then(|v| v.parse().ok())
        .expect("an RSS in MB");
    assert!(rss_mb > 5.0, "{storage_row}");
    assert!(stdout.contains("c1 = ") && stdout.contains("c3 = "), "no watch fit in\n{stdout}");

    // The JSON: every row measured from /proc on its own fresh server.
    let json = files_ending(out.path(), "-actcd-tables.json");
    assert_eq!(json.len(), 1, "{json:?}");
    let doc: TablesDoc = serde_json::from_str(&std::fs::read_to_string(&json[0]).expect("readable"))
        .expect("a tables document");
    assert_eq!(doc.server, "actcd");
    assert_eq!(doc.storage.len(), 3);
    for r in &doc.storage {
        assert!(r.complete(), "{r:?}");
        assert!(
            r.outcome.server_rss_idle_kb > 1000 && r.outcome.server_rss_kb > r.outcome.server_rss_idle_kb,
            "{r:?}"
        );
        assert_eq!(r.keys_counted, r.row.keys);
    }
    let over = |i: usize| doc.storage[i].outcome.delta_bytes();
    assert!(over(1) > over(0), "5 versions of 2k keys cost more than 1: {} vs {}", over(1), over(0));
    assert_eq!(doc.watch.len(), 4);
    assert!(doc.watch.iter().all(|r| r.complete()), "{:?}", doc.watch);
    let watch_over = |w: u64| {
        doc.watch.iter().find(|r| r.row.watches() == w).map(|r| r.outcome.delta_bytes()).expect("row")
    };
    assert!(watch_over(10_000) > watch_over(100), "10k watches cost more than 100");
    let (fit, rows) = memtable::coefficients("actcd", &doc.watch);
    assert_eq!(rows, 4);
    assert!(fit.is_some_and(|c| c[0] > 0.0), "c1 is positive: {fit:?}");
    assert_eq!(doc.qps.len(), 6);
    for r in &doc.qps {
        assert!(r.failed.is_none() && r.errors == 0 && r.requests == r.run.total && r.qps > 0.0, "{r:?}");
    }

    // The charts: real PNGs of the chart's size with something drawn on them.
    for chart in ["storage-memory", "watch-memory", "qps"] {
        let pngs = files_ending(out.path(), &format!("-actcd-{chart}.png"));
        assert_eq!(pngs.len(), 1, "{chart}: {pngs:?}");
        let bytes = std::fs::read(&pngs[0]).expect("readable");
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{chart}: not a PNG");
        assert!(bytes.len() > 3000, "{chart}: only {} bytes", bytes.len());
        let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("decodes");
        let mut pixels = vec![0; reader.output_buffer_size().expect("sized")];
        reader.next_frame(&mut pixels).expect("one frame");
        let coloured = pixels.chunks(3).filter(|p| p[0] != p[1] || p[1] != p[2]).count();
        assert!(coloured > 1000, "{chart}: {coloured} coloured pixels");
    }
    // Servers stopped, data dirs and logs gone.
    let left: Vec<_> =
        std::fs::read_dir(work.path()).expect("work dir").flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
