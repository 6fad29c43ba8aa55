//! Whether a row fits the machine: cost models (fitted from the rows measured so far, or
//! etcd-sized defaults) against memory, file descriptors and time.

use super::{Row, RowResult};
use crate::fit::{fit, predict};
use actcd_test_support::procfs::{self, Proc};

/// A per-row cost model (bytes or seconds): a base every row pays (the idle server or client)
/// plus c1·conns + c2·streams + c3·watches, and where the coefficients come from (a fit of N
/// rows, or defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub base: f64,
    pub per: [f64; 3],
    pub source: String,
}

impl Model {
    pub fn predict(&self, row: &Row) -> f64 {
        predict(self.base, &self.per, &row.terms())
    }
}

/// The models a plan estimates with: server and client RSS (bytes), and seconds from the first
/// dial to the last created response.
#[derive(Debug, Clone)]
pub struct Models {
    pub server: Model,
    pub client: Model,
    pub time: Model,
}

/// Coefficients used until three independent rows are measured: etcd 3.4 on a 2-core machine
/// (DESIGN.md: ~107 KB per connection, ~45 KB per stream, up to ~5 KB per watch), a tonic client,
/// and a slow setup, all on the high side so that the first estimates skip rather than swap.
pub fn default_models() -> Models {
    Models {
        server: Model {
            base: 100e6,
            per: [110e3, 50e3, 5e3],
            source: "default coefficients (etcd 3.4 on this machine, high side)".to_string(),
        },
        client: Model { base: 20e6, per: [60e3, 20e3, 200.0], source: "default coefficients".to_string() },
        time: Model { base: 1.0, per: [2e-3, 5e-4, 2e-5], source: "default coefficients".to_string() },
    }
}

/// The models fitted from `results` (complete rows only), each falling back to
/// [`default_models`] when the rows do not determine it. While every measured row has one watch
/// per stream (streams and watches equal), c1 and c2 + c3 are fitted and c3 keeps its default:
/// the estimate of a one-watch row stays close and that of a many-watch row stays high.
pub fn models_from(results: &[RowResult]) -> Models {
    let done: Vec<&RowResult> = results.iter().filter(|r| r.complete()).collect();
    let one_watch = done.iter().all(|r| r.row.watches_per_stream == 1);
    let defaults = default_models();
    let source = format!("a fit of {} measured rows", done.len());
    let model = |f: &dyn Fn(&RowResult) -> f64, floor: f64, base: f64, default: &Model| -> Model {
        let full: Vec<([f64; 3], f64)> = done.iter().map(|r| (r.row.terms(), f(r))).collect();
        if let Some(per) = fit(&full, floor) {
            return Model { base, per, source: source.clone() };
        }
        let two: Vec<([f64; 2], f64)> =
            done.iter().map(|r| ([r.row.clients as f64, r.row.streams() as f64], f(r))).collect();
        match fit(&two, floor) {
            Some([c1, c23]) if one_watch => Model {
                base,
                per: [c1, c23, default.per[2]],
                source: format!("{source} of one watch per stream (per-watch default)"),
            },
            _ => default.clone(),
        }
    };
    let max_of = |f: &dyn Fn(&RowResult) -> f64| done.iter().map(|r| f(r)).fold(0.0, f64::max);
    let server_base =
        if done.is_empty() { defaults.server.base } else { max_of(&|r| r.outcome.idle_bytes()) };
    let client_base = if done.is_empty() {
        defaults.client.base
    } else {
        max_of(&|r| r.client_rss_idle_kb as f64 * 1024.0)
    };
    Models {
        server: model(&|r| r.outcome.delta_bytes(), 1e6, server_base, &defaults.server),
        client: model(&|r| r.client_delta_bytes(), 1e6, client_base, &defaults.client),
        time: model(&|r| r.setup_secs, 0.5, defaults.time.base, &defaults.time),
    }
}

/// What the machine offers a row: `MemAvailable` (bytes, read while no server runs), and the
/// client's and the server's open-file limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    pub mem_available: u64,
    pub client_fds: u64,
    pub server_fds: u64,
}

/// What the machine offers now; the server's open-file limit is this process's when its pid is
/// not known.
pub fn machine(server_pid: Option<u32>) -> Machine {
    let client_fds = procfs::open_file_limit(Proc::Me).unwrap_or(u64::MAX);
    Machine {
        mem_available: procfs::mem_available().unwrap_or(0),
        client_fds,
        server_fds: server_pid.and_then(|p| procfs::open_file_limit(Proc::Pid(p))).unwrap_or(client_fds),
    }
}

/// Limits a plan applies on top of the machine's: memory kept free for the rest of the machine
/// (bytes), the longest setup a row may take (seconds), the factor estimates are multiplied by
/// before they are compared with the machine, and the most memory server and client may take
/// together (bytes), however much the machine has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub reserve: u64,
    pub max_secs: f64,
    pub margin: f64,
    pub budget: u64,
}

/// File descriptors a process needs besides one per connection (listeners, logs, the store's
/// files).
const FD_SLACK: u64 = 200;

/// Whether a row runs, with its estimated server and client bytes and setup seconds, or why not.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Run { server: f64, client: f64, secs: f64 },
    Skip(String),
}

pub fn plan(row: &Row, machine: &Machine, limits: &Limits, models: &Models) -> Verdict {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    if row.clients + FD_SLACK > machine.client_fds {
        return Verdict::Skip(format!(
            "needs {} client file descriptors, the limit is {} (ulimit -n)",
            row.clients + FD_SLACK,
            machine.client_fds
        ));
    }
    if row.clients + FD_SLACK > machine.server_fds {
        return Verdict::Skip(format!(
            "needs {} server file descriptors, the server's limit is {}",
            row.clients + FD_SLACK,
            machine.server_fds
        ));
    }
    let server = models.server.predict(row) * limits.margin;
    let client = models.client.predict(row) * limits.margin;
    if let Some(why) = memory_room(server + client, machine, limits) {
        return Verdict::Skip(format!(
            "needs ~{:.1} GiB (server ~{:.1}, client ~{:.1}; server from {}), {why}",
            gib(server + client),
            gib(server),
            gib(client),
            models.server.source,
        ));
    }
    let secs = models.time.predict(row) * limits.margin;
    if secs > limits.max_secs {
        return Verdict::Skip(format!(
            "setup would take ~{secs:.0} s (from {}), over the {:.0} s row limit",
            models.time.source, limits.max_secs
        ));
    }
    Verdict::Run { server, client, secs }
}

/// Why `bytes` do not fit: more than the machine has free after the reserve, or more than the
/// budget; `None` when they fit.
pub fn memory_room(bytes: f64, machine: &Machine, limits: &Limits) -> Option<String> {
    let gib = |b: f64| b / (1u64 << 30) as f64;
    let free = machine.mem_available.saturating_sub(limits.reserve) as f64;
    if bytes > free {
        Some(format!("{:.1} GiB free after a {:.1} GiB reserve", gib(free), gib(limits.reserve as f64)))
    } else if bytes > limits.budget as f64 {
        Some(format!("over the {:.1} GiB budget for server and client together", gib(limits.budget as f64)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::{quick_rows, row, test_support::done};

    #[test]
    fn plan_skips_what_does_not_fit() {
        let machine = Machine { mem_available: 22 << 30, client_fds: 20_000, server_fds: 20_000 };
        let limits = Limits { reserve: 2 << 30, max_secs: 600.0, margin: 1.25, budget: u64::MAX };
        let d = default_models();
        assert!(matches!(plan(&row(1000, 1, 1), &machine, &limits, &d), Verdict::Run { .. }));
        // 25M watches at etcd's 5 KB each: far over 22 GiB.
        let Verdict::Skip(why) = plan(&row(5000, 50, 100), &machine, &limits, &d) else { panic!("runs") };
        assert!(why.contains("GiB"), "{why}");
        let Verdict::Skip(why) = plan(&row(20_000, 1, 1), &machine, &limits, &d) else { panic!("runs") };
        assert!(why.contains("file descriptors"), "{why}");
        // A budget below what the machine has free: 5k connections at etcd's ~110 KB do not fit 1 GiB.
        let budget = Limits { budget: 1 << 30, ..limits };
        assert!(matches!(plan(&row(1000, 1, 1), &machine, &budget, &d), Verdict::Run { .. }));
        let Verdict::Skip(why) = plan(&row(5000, 1, 1), &machine, &budget, &d) else { panic!("runs") };
        assert!(why.contains("1.0 GiB budget"), "{why}");
        // A lean server measured on the quick rows: 25M watches fit.
        let c = [21e3, 3e3, 90.0];
        let results: Vec<_> = quick_rows().iter().map(|r| done(*r, 20.0, c)).collect();
        let m = models_from(&results);
        assert!((m.server.per[2] - 90.0).abs() < 1.0, "{:?}", m.server);
        assert!(m.server.source.contains("11 measured rows"));
        assert!(matches!(plan(&row(5000, 50, 100), &machine, &limits, &m), Verdict::Run { .. }));
        let tight = Limits { max_secs: 10.0, ..limits };
        let Verdict::Skip(why) = plan(&row(5000, 50, 100), &machine, &tight, &m) else { panic!("runs") };
        assert!(why.contains("row limit"), "{why}");
    }

    #[test]
    fn one_watch_rows_estimate_conns_and_streams() {
        let c = [21e3, 3e3, 90.0];
        let ones = [row(1000, 1, 1), row(2000, 1, 1), row(1000, 10, 1), row(2000, 50, 1)];
        let results: Vec<_> = ones.iter().map(|r| done(*r, 20.0, c)).collect();
        let m = models_from(&results);
        assert!((m.server.per[0] - 21e3).abs() < 100.0, "{:?}", m.server);
        assert!((m.server.per[1] - 3090.0).abs() < 10.0, "{:?}", m.server);
        assert_eq!(m.server.per[2], default_models().server.per[2]);
        assert!(m.server.source.contains("per-watch default"), "{}", m.server.source);
        // Too few rows: the defaults.
        assert_eq!(models_from(&results[..1]).server, default_models().server);
    }
}
