//! The table in etcd's layout, its fit and per-watch steps, and two servers side by side.

use std::fmt::Write as _;

use super::{Row, RowResult};
use crate::fit::{fit, predict};
use actcd_bench::format::{count, mb, per_item, table_head};

/// One step of a row shape: from `from` to `to` watches per stream at the same clients and
/// streams per client, the server's RSS growth (bytes) divided by the watches added. Unlike c3
/// (fitted over every row), it shows where a shape's cost per watch grows in steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchStep {
    pub clients: u64,
    pub streams_per_client: u64,
    pub from: u64,
    pub to: u64,
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
    let mut s = table_head(&format!("clients | streams per client | watchers per stream | watchers total | {base} RSS | {other} RSS | {other}/{base} | {base} over idle | {other} over idle | {other}/{base}"));
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
    let _ = writeln!(s, "Fitted over the {nb} rows both measured:\n");
    s += &table_head(&format!("coefficient | {base} ({nb} rows) | {other} ({no} rows) | {other}/{base}"));
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
    let mut s = table_head("clients | streams per client | watchers per stream | watchers total | memory usage (RSS) | idle RSS | over idle | fit | fit error | client RSS | setup");
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
        s += &table_head("clients | streams per client | watchers per stream | per watch");
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
    use crate::memtable::{parse_rows, quick_rows, row, test_support::done};
    use crate::outcome::{MemoryRow, Outcome};

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
    fn table_lists_every_row_with_the_fit() {
        let c = [21e3, 3e3, 90.0];
        let mut results: Vec<_> = quick_rows().iter().map(|r| done(*r, 20.0, c)).collect();
        let skipped = Outcome::skipped("actcd".to_string(), "needs ~30 GiB".to_string());
        results.push(RowResult::new(row(5000, 50, 100), skipped));
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
}
