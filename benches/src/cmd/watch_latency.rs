//! `watch-latency`: `--streams` streams of `--watchers-per-stream` watchers of one key, then one
//! putter at `--put-rate`; reports the puts and each event's latency from its put's send.

use crate::conn::connect;
use crate::keys::random_bytes;
use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;
use crate::watch_streams::{check_stamped_puts, open_streams, run_events, EventPhase};
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::sync::Arc;

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
        let Some(channels) = connect(settings, stop, out, &["watch-create"]).await else { return };
        let key = Bytes::from(random_bytes(a.key_size));
        let per = a.watchers_per_stream;
        let keys_of = |_| vec![key.clone(); per];
        let opening = (a.streams, (a.streams * per) as u64, a.streams);
        let (streams, _) =
            open_streams((settings, stop, out), &channels, opening, keys_of, (a.prevkv, false)).await;
        if stop.is_stopped() {
            return;
        }
        let phase = EventPhase {
            expected: a.put_total * (streams.len() * per) as u64,
            keys: Arc::new(vec![key]),
            put_total: a.put_total,
            put_rate: a.put_rate,
            // One putter, like etcd's: puts go out one after another at --put-rate.
            put_channels: vec![channels[0].clone()],
            value_size: a.val_size,
        };
        let (events, puts, took) = run_events(settings, stop, streams, phase).await;
        out.report("Put summary:\n", puts.stats(took), "");
        out.report("Watch events summary:\n", events.stats(took), "");
    }
}
