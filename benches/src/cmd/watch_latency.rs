//! `watch-latency`: `--streams` streams of `--watchers-per-stream` watchers of one key, then one
//! putter at `--put-rate`; reports the puts and each event's latency from its put's send.

use super::watch_fanout::{fan_out, Shape};
use crate::keys::random_bytes;
use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;
use crate::watch_streams::check_stamped_puts;
use bytes::Bytes;
use clap::{ArgAction, Args};

#[derive(Debug, Clone, Args)]
pub struct WatchLatencyArgs {
    /// Total watch streams.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Total watchers per stream.
    #[arg(long, default_value_t = 10)]
    pub watchers_per_stream: usize,
    /// Ask for the previous key-value with each event.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub prevkv: bool,
    /// Total number of put requests.
    #[arg(long, default_value_t = 1000)]
    pub put_total: u64,
    /// Number of keys to put per second (0 is no limit).
    #[arg(long, default_value_t = 100)]
    pub put_rate: u64,
    /// Key size of watch response.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Value size of watch response (at least 8: the put's send time travels in it).
    #[arg(long, default_value_t = 32)]
    pub val_size: usize,
}

impl WatchLatencyArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.streams == 0 || self.watchers_per_stream == 0 {
            return Err("--streams and --watchers-per-stream must be at least 1".to_string());
        }
        check_stamped_puts(self.key_size, self.val_size)
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        // watch-fanout's load of one key, with one putter like etcd's: puts go out one after
        // another at --put-rate.
        let shape = Shape {
            watchers: a.streams * a.watchers_per_stream,
            keys: 1,
            streams: a.streams,
            puts: a.put_total,
            put_clients: 1,
            val_size: a.val_size,
        };
        let key = vec![Bytes::from(random_bytes(a.key_size))];
        let fanned = fan_out((settings, stop, out), &shape, a.put_rate, key, (a.prevkv, false)).await;
        let Some((events, puts, took, ..)) = fanned else { return };
        out.report("Put summary:\n", puts.stats(took), "");
        out.report("Watch events summary:\n", events.stats(took), "");
    }
}
