//! The command line of `actcd-tables`: the load client's global flags (they shape the loads
//! the tables run) and four commands: `measure` (the tables), `compare` (two runs side by
//! side), `watch-memory` (one row of the watch-memory table against a running server, or rows
//! measured earlier printed as etcd's table) and `fanout` (watch fan-out, actcd against etcd).

use crate::compare::CompareArgs;
use crate::fanout::FanoutArgs;
use crate::measure::MeasureArgs;
use crate::watch_row::WatchMemoryArgs;
use actcd_bench::execute::{execute, Run};
use actcd_bench::output::Out;
use actcd_bench::settings::{Global, Settings};
use actcd_bench::stop::Stop;
use clap::{Parser, Subcommand};

/// `actcd-tables`: etcd's published benchmark tables, reproduced.
#[derive(Debug, Parser)]
#[command(
    name = "actcd-tables",
    version,
    about = "etcd's published benchmark tables (storage memory, watch memory, put/range QPS) reproduced against actcd or etcd, with actcd-bench's load client"
)]
pub struct Cli {
    /// The load client's flags (endpoints, connections, clients, timeouts).
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
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

/// A command that loads a server.
enum Load {
    Measure(MeasureArgs),
    WatchMemory(WatchMemoryArgs),
    Fanout(FanoutArgs),
}

impl Run for Load {
    async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        match self {
            Load::Measure(a) => a.run(settings, stop, out).await,
            Load::WatchMemory(a) => a.run(settings, stop, out).await,
            Load::Fanout(a) => a.run(settings, stop, out).await,
        }
    }
}

/// Parses the command line, runs the command and exits with its code: 0 on a finished run, 1
/// when it stopped early (or a row did not complete), 2 on bad flags.
pub fn main() {
    let cli = Cli::parse();
    let (name, checked) = match &cli.command {
        Command::Measure(a) => ("measure", a.validate()),
        Command::Compare(_) => ("compare", Ok(())),
        Command::WatchMemory(a) => ("watch-memory", a.validate()),
        Command::Fanout(a) => ("fanout", a.validate()),
    };
    let code = match cli.global.settings().and_then(|s| checked.map(|_| s)) {
        Err(e) => {
            eprintln!("actcd-tables {name}: {e}");
            2
        }
        // Offline modes: no connection, no report, no client CPU line.
        Ok(settings) => match cli.command {
            Command::Compare(a) => a.run(),
            Command::WatchMemory(a) if a.offline() => a.run_offline(),
            Command::WatchMemory(a) => execute("actcd-tables", name, &settings, Load::WatchMemory(a)),
            Command::Measure(a) => execute("actcd-tables", name, &settings, Load::Measure(a)),
            Command::Fanout(a) => execute("actcd-tables", name, &settings, Load::Fanout(a)),
        },
    };
    std::process::exit(code);
}
