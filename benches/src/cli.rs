//! `actcd-bench`'s commands, each variant holding that command's flags (`cmd`), run through
//! [`crate::execute`].

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
use crate::execute::Run;
use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;

#[cfg(test)]
mod against_stub;

pub type Cli = crate::execute::Cli<Command>;

/// The commands, and [`Run`] by each command's own `validate` and `run`.
macro_rules! commands {
    ($($(#[doc = $doc:literal])* $name:ident($args:ty),)*) => {
        #[derive(Debug, clap::Subcommand)]
        pub enum Command {
            $($(#[doc = $doc])* $name($args),)*
        }

        impl Run for Command {
            fn validate(&self) -> Result<(), String> {
                match self {
                    $(Command::$name(a) => a.validate(),)*
                }
            }

            async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
                match self {
                    $(Command::$name(a) => a.run(settings, stop, out).await,)*
                }
            }
        }
    };
}

commands! {
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

pub fn main() -> ! {
    crate::execute::main::<Command>(
        "actcd-bench",
        "A load client for etcd v3 endpoints (actcd or etcd) with etcd benchmark's commands, flags and report",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Every command parses with every global flag: a global flag whose id equals a command's
    /// argument (`--key` and range's KEY did) panics clap at the first access.
    #[test]
    fn global_flags_do_not_clash_with_command_arguments() {
        Cli::command().debug_assert();
        #[rustfmt::skip]
        let cli = Cli::try_parse_from([
            "actcd-bench", "range", "foo", "--endpoints", "https://127.0.0.1:1",
            "--cacert", "ca.pem", "--cert", "c.pem", "--key", "k.pem",
        ])
        .expect("parses");
        assert!(matches!(cli.command, Command::Range(_)));
        assert_eq!(cli.global.key.as_deref(), Some(std::path::Path::new("k.pem")));
        let missing = crate::settings::Global { cert: None, ..cli.global.clone() };
        assert!(missing.settings().is_err(), "--key without --cert is refused");
    }
}
