//! The commands, one file per family, and what they share: checking flags before anything
//! connects, dialing, and the client-to-connection mapping.

pub mod lease;
pub mod put;
pub mod range;
pub mod storage_memory;
pub mod tables;
pub mod txn;
pub mod watch;
pub mod watch_memory;

#[cfg(test)]
mod against_stub;

use crate::cli::Command;
use crate::conn::dial;
use crate::report::Recorder;
use crate::runner::{Out, Settings, Stop};
use std::time::Duration;
use tonic::transport::Channel;

/// Checks a command's flags for bad values and combinations, before anything connects.
pub fn validate(command: &Command) -> Result<(), String> {
    match command {
        Command::Put(a) => put::validate(a),
        Command::Range(a) => range::validate(a),
        Command::TxnPut(a) => txn::validate_put(a),
        Command::TxnMixed(a) => txn::validate_mixed(a),
        Command::Watch(a) => watch::validate_watch(a),
        Command::WatchLatency(a) => watch::validate_latency(a),
        Command::WatchFanout(a) => watch::validate_fanout(a),
        Command::WatchMemory(a) => watch_memory::validate(a),
        Command::LeaseKeepalive(_) => Ok(()),
        Command::Tables(a) => tables::validate(a),
    }
}

/// Runs a validated command.
pub async fn run(settings: &Settings, stop: &Stop, out: &Out, command: Command) {
    match command {
        Command::Put(a) => put::run(settings, stop, out, a).await,
        Command::Range(a) => range::run(settings, stop, out, a).await,
        Command::TxnPut(a) => txn::run_put(settings, stop, out, a).await,
        Command::TxnMixed(a) => txn::run_mixed(settings, stop, out, a).await,
        Command::Watch(a) => watch::run_watch(settings, stop, out, a).await,
        Command::WatchLatency(a) => watch::run_latency(settings, stop, out, a).await,
        Command::WatchFanout(a) => watch::run_fanout(settings, stop, out, a).await,
        Command::WatchMemory(a) => watch_memory::run(settings, stop, out, a).await,
        Command::LeaseKeepalive(a) => lease::run(settings, stop, out, a).await,
        Command::Tables(a) => tables::run(settings, stop, out, a).await,
    }
}

/// Dials every connection. When any fails, prints what a report of nothing completed looks like
/// (each failed connection counted in the error distribution of `reports`), stops the run with
/// the reason, and returns `None`.
pub async fn connect(settings: &Settings, stop: &Stop, out: &Out, reports: &[&str]) -> Option<Vec<Channel>> {
    match dial(&settings.endpoints, settings.conns, settings.dial_timeout).await {
        Ok(channels) => Some(channels),
        Err(errors) => {
            let first = errors.first().map(|e| e.to_string()).unwrap_or_else(|| "cannot connect".to_string());
            for name in reports {
                let rec = Recorder::new(*name, 1, false);
                for e in &errors {
                    rec.err(0, &e.to_string());
                }
                out.report("", rec.stats(Duration::ZERO), "\n");
            }
            stop.stop(format!("{first} ({} of {} connections failed)", errors.len(), settings.conns));
            None
        }
    }
}

/// The connection client `client` uses: clients go round-robin over connections.
pub fn channel_for(channels: &[Channel], client: usize) -> Channel {
    channels[client % channels.len()].clone()
}

/// Checks that keys of `key_size` bytes hold every key number below `key_space_size`.
pub fn check_key_space(key_size: usize, key_space_size: u64) -> Result<(), String> {
    if key_space_size == 0 {
        return Err(format!("expected positive --key-space-size, got ({key_space_size})"));
    }
    let need = crate::keys::varint_len(key_space_size.saturating_sub(1) as i64);
    if key_size < need {
        return Err(format!(
            "--key-size {key_size} is too small for --key-space-size {key_space_size} (keys need {need} bytes)"
        ));
    }
    Ok(())
}

/// The `--consistency` flag: `l` (linearizable) or `s` (serializable); true for serializable.
pub fn serializable(consistency: &str) -> Result<bool, String> {
    match consistency {
        "l" => Ok(false),
        "s" => Ok(true),
        other => Err(format!("--consistency must be l (linearizable) or s (serializable), got {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_space_fits_key_size() {
        assert!(check_key_space(8, 1).is_ok());
        assert!(check_key_space(1, 64).is_ok());
        assert!(check_key_space(1, 65).is_err());
        assert!(check_key_space(8, 0).is_err());
    }

    #[test]
    fn consistency_is_l_or_s() {
        assert_eq!(serializable("l"), Ok(false));
        assert_eq!(serializable("s"), Ok(true));
        assert!(serializable("x").is_err());
    }
}
