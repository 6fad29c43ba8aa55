//! `actcd-tables`' commands: `measure` (the tables), `compare` (two runs side by side),
//! `watch-memory` (one row of the watch-memory table against a running server, or rows measured
//! earlier printed as etcd's table) and `fanout` (watch fan-out, actcd against etcd), run
//! through `actcd_bench::execute` with the load client's global flags (they shape the loads).

use crate::fanout::FanoutArgs;
use crate::measure::MeasureArgs;
use crate::tablesdoc::CompareArgs;
use crate::watch_row::WatchMemoryArgs;
use actcd_bench::execute::Run;
use actcd_bench::output::Out;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure the tables: storage memory (N keys x versions x key size x value size: server
    /// RSS), watch memory (clients x streams x watches: server RSS, with the fitted c1, c2, c3)
    /// and the put/range QPS of etcd's performance doc; printed in etcd's layout, written as
    /// JSON and PNG charts into --out.
    Measure(MeasureArgs),
    /// Put two runs of measure (their JSON files, BASE then OTHER) side by side with the ratios
    /// OTHER / BASE, and chart both. Measures nothing.
    Compare(CompareArgs),
    /// Watch memory: one row of etcd's watch-memory table (clients x streams x watches) and the
    /// server's RSS, against a server already running (--server-pid); --table prints results in
    /// etcd's layout. measure runs the whole table, a fresh server per row.
    WatchMemory(WatchMemoryArgs),
    /// Watch fan-out, actcd against etcd side by side: many watchers of one key, events
    /// delivered per second and put-to-event latency, fresh servers, median of repeats.
    Fanout(FanoutArgs),
}

impl Run for Command {
    fn validate(&self) -> Result<(), String> {
        match self {
            Command::Measure(a) => a.validate(),
            Command::Compare(_) => Ok(()),
            Command::WatchMemory(a) => a.validate(),
            Command::Fanout(a) => a.validate(),
        }
    }

    fn offline(self) -> Result<i32, Self> {
        match self {
            Command::Compare(a) => Ok(a.run()),
            Command::WatchMemory(a) if a.table => Ok(a.print_tables()),
            other => Err(other),
        }
    }

    async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        match self {
            Command::Measure(a) => a.run(settings, stop, out).await,
            Command::WatchMemory(a) => a.run(settings, stop, out).await,
            Command::Fanout(a) => a.run(settings, stop, out).await,
            Command::Compare(_) => {}
        }
    }
}

pub fn main() -> ! {
    actcd_bench::execute::main::<Command>(
        "actcd-tables",
        "etcd's published benchmark tables (storage memory, watch memory, put/range QPS) reproduced against actcd or etcd, with actcd-bench's load client",
    )
}
