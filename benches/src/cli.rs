//! The command line of `actcd-bench`: etcd benchmark's global flags ([`Global`]) and its
//! commands, each variant holding that command's own flags; checked for bad values before
//! anything connects, then run through [`execute`].

use crate::cmd::authenticate::AuthenticateArgs;
use crate::cmd::failover::FailoverArgs;
use crate::cmd::k8s::K8sArgs;
use crate::cmd::lease_keepalive::LeaseKeepaliveArgs;
use crate::cmd::put::PutArgs;
use crate::cmd::range::RangeArgs;
use crate::cmd::stm::StmArgs;
use crate::cmd::txn_mixed::TxnMixedArgs;
use crate::cmd::txn_put::TxnPutArgs;
use crate::cmd::watch::WatchArgs;
use crate::cmd::watch_fanout::WatchFanoutArgs;
use crate::cmd::watch_get::WatchGetArgs;
use crate::cmd::watch_latency::WatchLatencyArgs;
use crate::execute::{execute, Run};
use crate::output::Out;
use crate::settings::{Global, Settings};
use crate::stop::Stop;
use clap::{Parser, Subcommand};

#[cfg(test)]
mod against_stub;

/// `actcd-bench`: etcd benchmark's commands against any etcd v3 endpoint.
#[derive(Debug, Parser)]
#[command(
    name = "actcd-bench",
    version,
    about = "A load client for etcd v3 endpoints (actcd or etcd) with etcd benchmark's commands, flags and report",
    after_help = "Boolean flags take an optional value: --sequential-keys, --sequential-keys=true or =false."
)]
pub struct Cli {
    /// Flags that every command takes.
    #[command(flatten)]
    pub global: Global,
    /// The benchmark to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark put.
    Put(PutArgs),
    /// Benchmark range.
    Range(RangeArgs),
    /// Benchmark txn-put (transactions of --txn-ops puts).
    TxnPut(TxnPutArgs),
    /// Benchmark a mixed load of txn-put and txn-range.
    TxnMixed(TxnMixedArgs),
    /// Benchmark watch: watch creation, then events delivered for concurrent puts.
    Watch(WatchArgs),
    /// Benchmark watch with get: serializable gets while many watchers catch up from an old
    /// revision (unsynced watchers).
    WatchGet(WatchGetArgs),
    /// Benchmark watch latency: from a put's send to each watcher's event.
    WatchLatency(WatchLatencyArgs),
    /// Benchmark watch fan-out: many watchers of one key, events delivered per second and
    /// put-to-event latency.
    WatchFanout(WatchFanoutArgs),
    /// Benchmark lease keepalive (one short keep-alive stream per request).
    LeaseKeepalive(LeaseKeepaliveArgs),
    /// Benchmark Authenticate with one name and password (right or wrong): what checking a
    /// password costs the server.
    Authenticate(AuthenticateArgs),
    /// Benchmark STM: etcd's software transactional memory (client-side transactions of gets
    /// and puts, retried on conflict) at an isolation level, optionally under a lock.
    Stm(StmArgs),
    /// Benchmark a Kubernetes apiserver's traffic: objects under /registry, optimistic writes,
    /// paginated lists, watches with progress requests, leases, counts and compaction.
    K8s(K8sArgs),
    /// Measure failover: one client puts without pause while a member is killed outside;
    /// reports the longest stretch between two acknowledged puts and the errors seen.
    Failover(FailoverArgs),
}

impl Command {
    /// Checks the command's flags for bad values and combinations, before anything connects.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Command::Put(a) => a.validate(),
            Command::Range(a) => a.validate(),
            Command::TxnPut(a) => a.validate(),
            Command::TxnMixed(a) => a.validate(),
            Command::Watch(a) => a.validate(),
            Command::WatchGet(a) => a.validate(),
            Command::WatchLatency(a) => a.validate(),
            Command::WatchFanout(a) => a.validate(),
            Command::LeaseKeepalive(_) | Command::Authenticate(_) | Command::Failover(_) => Ok(()),
            Command::Stm(a) => a.validate(),
            Command::K8s(a) => a.validate(),
        }
    }
}

impl Run for Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Put(_) => "put",
            Command::Range(_) => "range",
            Command::TxnPut(_) => "txn-put",
            Command::TxnMixed(_) => "txn-mixed",
            Command::Watch(_) => "watch",
            Command::WatchGet(_) => "watch-get",
            Command::WatchLatency(_) => "watch-latency",
            Command::WatchFanout(_) => "watch-fanout",
            Command::LeaseKeepalive(_) => "lease-keepalive",
            Command::Authenticate(_) => "authenticate",
            Command::Stm(_) => "stm",
            Command::K8s(_) => "k8s",
            Command::Failover(_) => "failover",
        }
    }

    async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        match self {
            Command::Put(a) => a.run(settings, stop, out).await,
            Command::Range(a) => a.run(settings, stop, out).await,
            Command::TxnPut(a) => a.run(settings, stop, out).await,
            Command::TxnMixed(a) => a.run(settings, stop, out).await,
            Command::Watch(a) => a.run(settings, stop, out).await,
            Command::WatchGet(a) => a.run(settings, stop, out).await,
            Command::WatchLatency(a) => a.run(settings, stop, out).await,
            Command::WatchFanout(a) => a.run(settings, stop, out).await,
            Command::LeaseKeepalive(a) => a.run(settings, stop, out).await,
            Command::Authenticate(a) => a.run(settings, stop, out).await,
            Command::Stm(a) => a.run(settings, stop, out).await,
            Command::K8s(a) => a.run(settings, stop, out).await,
            Command::Failover(a) => a.run(settings, stop, out).await,
        }
    }
}

/// Parses the command line, runs the command and exits with its code: 0 on a finished run, 1
/// when it stopped early (unreachable endpoint, fatal error, stall, Ctrl-C), 2 on bad flags.
pub fn main() {
    let cli = Cli::parse();
    let code = match cli.global.settings().and_then(|s| cli.command.validate().map(|_| s)) {
        Err(e) => {
            eprintln!("actcd-bench {}: {e}", cli.command.name());
            2
        }
        Ok(settings) => execute("actcd-bench", &settings, cli.command),
    };
    std::process::exit(code);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command parses with every global flag: a global flag whose id equals a command's
    /// argument (`--key` and range's KEY did) panics clap at the first access.
    #[test]
    fn global_flags_do_not_clash_with_command_arguments() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "actcd-bench",
            "range",
            "foo",
            "--endpoints",
            "https://127.0.0.1:1",
            "--cacert",
            "ca.pem",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
        ])
        .expect("parses");
        assert!(matches!(cli.command, Command::Range(_)));
        assert_eq!(cli.global.key.as_deref(), Some(std::path::Path::new("k.pem")));
        let missing = Global { cert: None, ..cli.global.clone() };
        assert!(missing.settings().is_err(), "--key without --cert is refused");
    }
}
