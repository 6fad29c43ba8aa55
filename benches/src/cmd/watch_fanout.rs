//! `watch-fanout`: watch-latency turned to throughput: `--watchers` watchers of one key spread
//! evenly over `--streams` streams, `--put-clients` concurrent putters (unthrottled by default),
//! and the report's figure is events delivered per second, from the first put to the last event.

use crate::conn::{channel_for, connect};
use crate::keys::Rng;
use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;
use crate::watch_streams::{
    check_stamped_puts, open_streams, run_events, watchers_on, EventPhase, StreamPlan,
};
use bytes::Bytes;
use clap::Args;
use std::sync::Arc;

/// `watch-fanout`'s flags.
#[derive(Debug, Clone, Args)]
pub struct WatchFanoutArgs {
    /// Watchers of the one key, spread evenly over the streams.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Watch streams (spread over --clients, which spread over --conns).
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    /// Puts to the watched key.
    #[arg(long, default_value_t = 1000)]
    pub puts: u64,
    /// Puts per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Concurrent putters, spread over the connections.
    #[arg(long, default_value_t = 8)]
    pub put_clients: usize,
    /// Key size of the watched key.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Value size of the puts (at least 8: the put's send time travels in the value).
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
}

impl WatchFanoutArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
        if a.watchers == 0 || a.streams == 0 || a.put_clients == 0 {
            return Err("--watchers, --streams and --put-clients must be at least 1".to_string());
        }
        if a.streams > a.watchers {
            return Err(format!(
                "--streams {} is more than --watchers {}: a stream would watch nothing",
                a.streams, a.watchers
            ));
        }
        check_stamped_puts(a.key_size, a.val_size)
    }

    /// Runs `watch-fanout`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(channels) = connect(settings, stop, out, &["watch-create"]).await else {
            return;
        };
        let key = Bytes::from(Rng::seeded(0).bytes(a.key_size));
        let k = key.clone();
        let (watchers, streams) = (a.watchers, a.streams);
        let (open, created, took) = open_streams(
            settings,
            stop,
            &channels,
            a.streams,
            move |s| vec![k.clone(); watchers_on(s, watchers, streams)],
            StreamPlan { prev_kv: false, timeout: settings.request_timeout },
        )
        .await;
        let create_stats = created.stats(took);
        if create_stats.errors > 0 || open.is_empty() {
            out.report("Watch creation summary:\n", create_stats, "");
        }
        if open.is_empty() || stop.is_stopped() {
            if !stop.is_stopped() {
                stop.stop("no watch stream could be opened");
            }
            return;
        }
        let live: u64 = open.iter().map(|s| watchers_on(s.index, watchers, streams) as u64).sum();
        let expected = a.puts * live;
        let phase = EventPhase {
            keys: Arc::new(vec![key]),
            put_total: a.puts,
            put_rate: a.put_rate,
            put_channels: (0..a.put_clients).map(|c| channel_for(&channels, c)).collect(),
            value_size: a.val_size,
            expected,
        };
        let (events, puts, took) = run_events(settings, stop, open, phase).await;
        let event_stats = events.stats(took);
        out.extra("watchers", live.into());
        out.extra("events_expected", expected.into());
        out.extra("events_per_sec", serde_json::json!(event_stats.requests_per_sec));
        out.report("Put summary:\n", puts.stats(took), "");
        out.print(&format!(
            "\nWatch fan-out: {live} watchers of one key, {} puts: {} events in {:.4} secs, {:.0} events/sec.\n",
            a.puts,
            event_stats.requests,
            took.as_secs_f64(),
            event_stats.requests_per_sec
        ));
        out.report("Watch events summary (put-to-event latency):\n", event_stats, "");
    }
}
