//! etcd's watch-memory table: rows of clients × streams per client × watches per stream, what a
//! row needs from the machine (file descriptors, memory, time) and whether it fits, the
//! least-squares fit of `memory ≈ c1·conns + c2·streams + c3·watches`, and the table in etcd's
//! layout with the fit under it.
//!
//! A row is measured on a fresh server (see `cmd::watch_memory`); its result is one JSON
//! document. The plan and the table are computed from such documents, so a driver that restarts
//! the server per row (`benches/watch-memory`) needs no arithmetic of its own.

mod plan;
mod result;
mod rows;
mod table;

pub use plan::{
    default_models, memory_room, models_from, plan, Limits, Machine, Model, Models, Verdict, FD_SLACK,
};
pub use result::{load_results, RowResult};
#[cfg(test)]
pub(crate) use rows::row;
pub use rows::{parse_rows, quick_rows, small_rows, Row, ETCD_ROWS};
pub use table::{coefficients, side_by_side, table, watch_steps, WatchStep};

#[cfg(test)]
pub(crate) mod test_support {
    use super::{Row, RowResult};
    use crate::fit::predict;
    use crate::outcome::Outcome;

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
            ..RowResult::skipped(r, String::new(), String::new())
        }
    }
}
