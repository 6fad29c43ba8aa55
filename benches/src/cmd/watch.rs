//! `watch`: `--streams` Watch streams spread over the clients (and so over the connections),
//! `--watch-per-stream` watches on each over `--watched-key-total` keys, then `--put-total`
//! puts to those keys; reports the watch creation and the events received.

use super::watch_fanout::{fan_out, Shape};
use crate::keys::{check_key_space, varint_key, Rng};
use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Total watch streams.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Total watchers per stream.
    #[arg(long, default_value_t = 100)]
    pub watch_per_stream: usize,
    /// Total number of keys to be watched.
    #[arg(long, default_value_t = 1)]
    pub watched_key_total: usize,
    /// Number of keys to put per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Number of put requests.
    #[arg(long, default_value_t = 1000)]
    pub put_total: u64,
    /// Key size of watch request.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub sequential_keys: bool,
}

impl WatchArgs {
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
        if a.streams == 0 || a.watch_per_stream == 0 || a.watched_key_total == 0 || a.key_size == 0 {
            return Err(
                "--streams, --watch-per-stream, --watched-key-total and --key-size must be at least 1".into(),
            );
        }
        check_key_space(a.key_size, a.key_space_size)
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let (grpc_conns, wanted) = (settings.clients.min(settings.conns), 1 + a.streams / 100);
        if grpc_conns < wanted {
            out.note(format!(
                "warning: grpc limits 100 streams per client connection, have {grpc_conns} but need {wanted}"
            ));
        }
        let mut rng = Rng::new();
        let keys: Vec<Bytes> = (0..a.watched_key_total)
            .map(|i| {
                let n =
                    if a.sequential_keys { i as u64 % a.key_space_size } else { rng.u64(..a.key_space_size) };
                Bytes::from(varint_key(n, a.key_size))
            })
            .collect();
        // watch-fanout's load, a putter per client, 8-byte values (the send time).
        let shape = Shape {
            watchers: a.streams * a.watch_per_stream,
            keys: keys.len(),
            streams: a.streams,
            puts: a.put_total,
            put_clients: settings.clients,
            val_size: 8,
        };
        let fanned = fan_out((settings, stop, out), &shape, a.put_rate, keys, (false, true)).await;
        let Some((events, puts, took, _, expected)) = fanned else { return };
        out.extra("events_expected", expected);
        out.report("Watch events received summary:\n", events.stats(took), "");
        // Failed puts are warnings: the events are the report.
        for e in &puts.stats(Duration::ZERO).error_distribution {
            out.note(format!("warning: [{}] puts failed: {}", e.count, e.error));
        }
    }
}
