//! `watch-fanout`: watch-latency turned to throughput: `--watchers` watchers of `--keys` keys
//! (one by default) spread evenly over `--streams` streams, `--put-clients` concurrent putters
//! (unthrottled by default) writing the keys in turn, and the report's figure is events
//! delivered per second, from the first put to the last event.
//!
//! With several keys, watcher g (counting across the streams in order) watches key g mod
//! `--keys`: 100k watchers over 1000 keys in 1000 streams give each key 100 watchers and each
//! stream 100 different keys, etcd's "100 connections x 10 streams x 100 watches" shape.

use crate::conn::{channel_for, connect};
use crate::keys::random_bytes;
use crate::output::Out;
use crate::report::Recorder;
use crate::settings::Settings;
use crate::stop::Stop;
use crate::watch_streams::{
    check_stamped_puts, expected_events, open_streams, run_events, watchers_on, EventPhase,
};
use bytes::Bytes;
use clap::Args;
use std::sync::Arc;
use std::time::Duration;

/// The fan-out's shape, which `actcd-tables fanout` runs on both servers too.
#[derive(Debug, Clone, Args)]
pub struct Shape {
    /// Watchers, spread evenly over the streams and the keys.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Watched keys; the puts go to them in turn.
    #[arg(long, default_value_t = 1)]
    pub keys: usize,
    /// Watch streams (spread over the clients, which spread over the connections).
    #[arg(long, default_value_t = 100)]
    pub streams: usize,
    /// Puts to the watched keys.
    #[arg(long, default_value_t = 5000)]
    pub puts: u64,
    /// Concurrent putters, spread over the connections.
    #[arg(long, default_value_t = 8)]
    pub put_clients: usize,
    /// Value size of the puts (at least 8: the put's send time travels in the value).
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
}

#[derive(Debug, Clone, Args)]
pub struct WatchFanoutArgs {
    #[command(flatten)]
    pub shape: Shape,
    /// Puts per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Key size of the watched keys.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
}

impl WatchFanoutArgs {
    pub fn validate(&self) -> Result<(), String> {
        let a = &self.shape;
        if a.watchers == 0 || a.streams == 0 || a.put_clients == 0 || a.keys == 0 {
            return Err("--watchers, --keys, --streams and --put-clients must be at least 1".to_string());
        }
        if a.streams > a.watchers {
            return Err(format!(
                "--streams {} is more than --watchers {}: a stream would watch nothing",
                a.streams, a.watchers
            ));
        }
        check_stamped_puts(self.key_size, a.val_size)
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self.shape;
        let keys = (0..a.keys).map(|_| Bytes::from(random_bytes(self.key_size))).collect();
        let fanned = fan_out((settings, stop, out), &a, self.put_rate, keys, (false, false)).await;
        let Some((events, puts, took, live, expected)) = fanned else { return };
        let event_stats = events.stats(took);
        out.extra("watchers", live);
        out.extra("events_expected", expected);
        out.extra("events_per_sec", event_stats.requests_per_sec);
        out.report("Put summary:\n", puts.stats(took), "");
        out.print(&format!(
            "\nWatch fan-out: {live} watchers of {} key(s), {} puts: {} events in {:.4} secs, {:.0} events/sec.\n",
            a.keys,
            a.puts,
            event_stats.requests,
            took.as_secs_f64(),
            event_stats.requests_per_sec
        ));
        out.report("Watch events summary (put-to-event latency):\n", event_stats, "");
    }
}

/// The load of the watch commands: `a.streams` streams of `a.watchers` watchers of `keys`
/// (watcher g watches key g mod keys), with prev_kv or not and the creation report always or
/// only on a failure (`flags`), then `a.puts` puts to the keys in turn at `put_rate`. The event
/// and put recorders, the puts' wall time, the watchers created and the events expected; `None`
/// when the run stopped before the puts.
pub async fn fan_out(
    (settings, stop, out): (&Settings, &Stop, &Out),
    a: &Shape,
    put_rate: u64,
    keys: Vec<Bytes>,
    flags: (bool, bool),
) -> Option<(Arc<Recorder>, Arc<Recorder>, Duration, usize, u64)> {
    let channels = connect(settings, stop, out, &["watch-create"]).await?;
    let keys_of = |s| watchers_on(s, a.watchers, a.streams).map(|g| keys[g % keys.len()].clone()).collect();
    let opening = (a.streams, a.watchers as u64, a.streams);
    let (open, _) = open_streams((settings, stop, out), &channels, opening, keys_of, flags).await;
    if stop.is_stopped() {
        return None;
    }
    let live: Vec<usize> = open.iter().flat_map(|s| watchers_on(s.index, a.watchers, a.streams)).collect();
    let expected = expected_events(live.iter().copied(), keys.len(), a.puts);
    let phase = EventPhase {
        keys: Arc::new(keys),
        put_total: a.puts,
        put_rate,
        put_channels: (0..a.put_clients).map(|c| channel_for(&channels, c)).collect(),
        value_size: a.val_size,
        expected,
    };
    let (events, puts, took) = run_events(settings, stop, open, phase).await;
    Some((events, puts, took, live.len(), expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_spread_over_keys_and_each_stream_watches_distinct_keys() {
        let (watchers, keys, streams) = (100_000, 1000, 1000);
        let mut per_key = vec![0; keys];
        for stream in 0..streams {
            let mut mine: Vec<usize> = watchers_on(stream, watchers, streams).map(|g| g % keys).collect();
            assert_eq!(mine.len(), 100);
            mine.sort_unstable();
            mine.dedup();
            assert_eq!(mine.len(), 100, "stream {stream} watches a key twice");
            mine.into_iter().for_each(|key| per_key[key] += 1);
        }
        assert!(per_key.iter().all(|&n| n == 100));
        assert_eq!(expected_events(0..watchers, keys, 5000), 5000 * 100);
        // One key, streams 0 and 2 of 3 open: every put reaches their 4 + 3 watchers.
        let open = [0, 2].into_iter().flat_map(|s| watchers_on(s, 10, 3));
        assert_eq!(expected_events(open, 1, 7), 7 * (4 + 3));
    }
}
