//! `watch-get`: serializable gets while many watchers catch up from an old revision (etcd
//! benchmark's "serialized key gets with many unsynced watchers").
//!
//! The run puts `--events` versions of one key (`watchkey`), then opens `--streams` Watch
//! streams over the clients and starts `--watchers` watchers of that key from the revision of
//! its first version (watcher `i` on stream `i mod streams`), so each has `--events` events to
//! catch up on: the server serves them from storage, not from its live fan-out. A stream sends
//! its next create once the previous one is answered, as etcd's client does. From the first
//! create on, one more client on a connection of its own gets key `abc` (serializable) over and
//! over until every watcher has its events; the report is those gets' latencies.

use crate::conn::{bounded, channel_for, connect, dial_one, kv_client, Conn, OpError, MAX_RESPONSE};
use crate::output::Out;
use crate::progress::Progress;
use crate::report::Recorder;
use crate::runner::watchdog;
use crate::settings::Settings;
use crate::stamped_events;
use crate::stop::Stop;
use crate::watch_streams::{create_request, watchers_on};
use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use bytes::Bytes;
use clap::Args;
use futures::SinkExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinSet;

/// The key the watchers watch (etcd benchmark's).
const WATCH_KEY: &[u8] = b"watchkey";
/// The key the gets read (etcd benchmark's; it need not exist).
const GET_KEY: &[u8] = b"abc";

#[derive(Debug, Clone, Args)]
pub struct WatchGetArgs {
    /// Total number of watchers.
    #[arg(long, default_value_t = 10000)]
    pub watchers: usize,
    /// Total number of watcher streams.
    #[arg(long, default_value_t = 1)]
    pub streams: usize,
    /// Number of events per watcher.
    #[arg(long, default_value_t = 8)]
    pub events: u64,
}

impl WatchGetArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.watchers == 0 || self.streams == 0 || self.events == 0 {
            return Err("--watchers, --streams and --events must be at least 1".to_string());
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let Some(channels) = connect(settings, stop, out, &["watch-get"]).await else { return };
        let Some(get_channel) = stop.check(dial_one(settings).await) else { return };
        let Some(from) = stop.check(put_versions(settings, channels[0].clone(), self.events).await) else {
            return;
        };
        let expected = self.watchers as u64 * self.events;
        let received = Arc::new(AtomicU64::new(0));
        let count = move |r: &Arc<AtomicU64>| r.load(Ordering::Relaxed);
        let progress = {
            let r = received.clone();
            Progress::start(settings, expected, move || count(&r))
        };
        let dog = {
            let r = received.clone();
            watchdog(stop.clone(), settings.stall_timeout, "watch event", move || {
                (count(&r), count(&r) < expected)
            })
        };
        let gets = Recorder::new("watch-get", settings.sample);
        let started = Instant::now();
        let mut streams = JoinSet::new();
        for s in 0..self.streams {
            let channel = channel_for(&channels, s % settings.clients);
            let (watchers, received, stop) =
                (watchers_on(s, self.watchers, self.streams).len(), received.clone(), stop.clone());
            let events = self.events;
            streams.spawn(async move {
                if let Err(e) = catch_up(channel, watchers, from, events, &received).await {
                    stop.stop(e.text);
                }
            });
        }
        // The gets run until every stream is done (or the run stops); a get cut off is not
        // recorded.
        let mut kv = kv_client(get_channel);
        let get = RangeRequest { key: Bytes::from_static(GET_KEY), serializable: true, ..Default::default() };
        let getting = async {
            loop {
                let sent = Instant::now();
                let _ = gets.record(sent, bounded(settings.request_timeout, kv.range(get.clone())).await);
            }
        };
        tokio::select! {
            _ = streams.join_all() => {}
            _ = stop.stopped() => {}
            () = getting => {}
        }
        let took = started.elapsed();
        dog.abort();
        progress.finish(count(&received));
        out.extra("events_received", count(&received));
        out.report("Get during watch summary:\n", gets.stats(took), "");
    }
}

/// Puts `versions` versions of [`WATCH_KEY`] (values "0", "1", ...); returns the revision of the
/// first, where the watchers start.
async fn put_versions(settings: &Settings, channel: Conn, versions: u64) -> Result<i64, String> {
    let mut kv = kv_client(channel);
    let mut first = 0;
    for i in 0..versions {
        let req = PutRequest {
            key: Bytes::from_static(WATCH_KEY),
            value: i.to_string().into(),
            ..Default::default()
        };
        let r = bounded(settings.request_timeout, kv.put(req))
            .await
            .map_err(|e| format!("putting the watched key: {e}"))?;
        if i == 0 {
            first = r.into_inner().header.map_or(0, |h| h.revision);
        }
    }
    Ok(first)
}

/// One stream's `watchers`, created one after another from revision `from`, read until each
/// has its `events` events. The error is why the stream could not go on.
async fn catch_up(
    channel: Conn,
    watchers: usize,
    from: i64,
    events: u64,
    received: &AtomicU64,
) -> Result<(), OpError> {
    if watchers == 0 {
        return Ok(());
    }
    let create = create_request(Bytes::from_static(WATCH_KEY), false, from);
    // One create is in flight at a time, so the buffer never fills.
    let (mut tx, rx) = futures::channel::mpsc::channel(1);
    let closed = || OpError::new("watch stream closed");
    tx.send(create.clone()).await.map_err(|_| closed())?;
    let failed = |e: OpError| match e.fatal {
        true => OpError::new(format!("the server does not serve Watch ({})", e.text)),
        false => OpError::new(format!("watch stream failed: {}", e.text)),
    };
    let mut responses =
        stamped_events::watch(channel, MAX_RESPONSE, rx).await.map_err(|s| failed(s.into()))?;
    let (mut created, mut done) = (1, 0);
    // Events seen per watch id; a watcher is done at `events`.
    let mut seen: HashMap<i64, u64> = HashMap::new();
    while done < watchers {
        let r = responses
            .message()
            .await
            .map_err(|s| failed(s.into()))?
            .ok_or_else(|| OpError::new("watch stream closed by the server"))?;
        if r.canceled {
            return Err(OpError::new(format!("watch canceled: {}", r.cancel_reason)));
        }
        if r.created && created < watchers {
            created += 1;
            tx.send(create.clone()).await.map_err(|_| closed())?;
        }
        if !r.events.is_empty() {
            received.fetch_add(r.events.len() as u64, Ordering::Relaxed);
            let n = seen.entry(r.watch_id).or_default();
            let before = *n;
            *n += r.events.len() as u64;
            done += usize::from(before < events && *n >= events);
        }
    }
    Ok(())
}
