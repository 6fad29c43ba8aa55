//! The table's rows: etcd's fifteen, the sets `--rows` names, and a row's terms in the formula.

use serde::{Deserialize, Serialize};

use actcd_bench::format::{count, parse_count};

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

pub(crate) const fn row(clients: u64, streams_per_client: u64, watches_per_stream: u64) -> Row {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_row_names_itself_as_rows_takes_it() {
        assert_eq!(row(2000, 50, 100).spec(), "2kx50x100");
        assert_eq!(row(2000, 50, 100).watches(), 10_000_000);
    }
}
