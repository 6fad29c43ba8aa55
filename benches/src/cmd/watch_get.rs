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

use crate::conn::{
    bounded, channel_for, connect, dial_one, is_fatal, kv_client, status_text, Conn, MAX_RESPONSE,
};
use crate::output::Out;
use crate::progress::Progress;
use crate::report::Recorder;
use crate::runner::watchdog;
use crate::settings::Settings;
use crate::stop::Stop;
use crate::watch_streams::watchers_on;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::watch_request::RequestUnion;
use actcd_proto::etcdserverpb::{PutRequest, RangeRequest, WatchCreateRequest, WatchRequest};
use bytes::Bytes;
use clap::Args;
use futures::SinkExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The key the watchers watch (etcd benchmark's).
const WATCH_KEY: &[u8] = b"watchkey";
/// The key the gets read (etcd benchmark's; it need not exist).
const GET_KEY: &[u8] = b"abc";

/// `watch-get`'s flags.
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
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.watchers == 0 || self.streams == 0 || self.events == 0 {
            return Err("--watchers, --streams and --events must be at least 1".to_string());
        }
        Ok(())
    }

    /// Runs `watch-get`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let Some(channels) = connect(settings, stop, out, &["watch-get"]).await else {
            return;
        };
        let Some(get_channel) = stop.check(dial_one(settings).await) else { return };
        let Some(start_revision) = stop.check(put_versions(settings, channels[0].clone(), self.events).await)
        else {
            return;
        };

        let expected = self.watchers as u64 * self.events;
        let received = Arc::new(AtomicU64::new(0));
        let progress = {
            let r = received.clone();
            Progress::start(settings, expected, move || r.load(Ordering::Relaxed))
        };
        let dog = {
            let r = received.clone();
            watchdog(stop.clone(), settings.stall_timeout, "watch event", move || {
                let n = r.load(Ordering::Relaxed);
                (n, n < expected)
            })
        };
        // Set when every watcher has its events: the gets stop then.
        let caught_up = Arc::new(watch::channel(false).0);
        let gets = Arc::new(Recorder::new("watch-get", 1, settings.sample));
        let started = Instant::now();
        let getter = tokio::spawn(get_loop(
            kv_client(get_channel),
            gets.clone(),
            caught_up.subscribe(),
            settings.request_timeout,
        ));
        let mut streams = JoinSet::new();
        for s in 0..self.streams {
            let unsynced = Unsynced {
                channel: channel_for(&channels, s % settings.clients),
                watchers: watchers_on(s, self.watchers, self.streams),
                start_revision,
                events: self.events,
                received: received.clone(),
            };
            let stop = stop.clone();
            streams.spawn(async move {
                if let Err(e) = unsynced.run().await {
                    stop.stop(e);
                }
            });
        }
        let mut stop_rx = stop.subscribe();
        loop {
            tokio::select! {
                next = streams.join_next() => if next.is_none() { break },
                _ = Stop::stopped(&mut stop_rx) => break,
            }
        }
        caught_up.send_replace(true);
        streams.abort_all();
        let _ = getter.await;
        let took = started.elapsed();
        dog.abort();
        progress.finish(received.load(Ordering::Relaxed));
        out.extra("events_received", received.load(Ordering::Relaxed).into());
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
            value: Bytes::from(i.to_string()),
            ..Default::default()
        };
        let r = bounded(settings.request_timeout, kv.put(req))
            .await
            .map_err(|e| format!("putting the watched key: {e}"))?;
        if i == 0 {
            first = r.header.map(|h| h.revision).unwrap_or(0);
        }
    }
    Ok(first)
}

/// Serializable gets of [`GET_KEY`], one after another, until `done`; a get cut off by `done`
/// is not recorded.
async fn get_loop(
    mut kv: KvClient<Conn>,
    rec: Arc<Recorder>,
    mut done: watch::Receiver<bool>,
    bound: std::time::Duration,
) {
    let req = RangeRequest { key: Bytes::from_static(GET_KEY), serializable: true, ..Default::default() };
    loop {
        let sent = Instant::now();
        tokio::select! {
            _ = done.wait_for(|d| *d) => return,
            r = tokio::time::timeout(bound, kv.range(req.clone())) => match r {
                Ok(Ok(_)) => rec.ok(0, sent, Instant::now()),
                Ok(Err(s)) => rec.err(0, &status_text(&s)),
                Err(_) => rec.err(0, &format!("request timed out after {bound:?} (--request-timeout)")),
            },
        }
    }
}

/// One stream's watchers, each to catch up on `events` events from `start_revision`.
struct Unsynced {
    channel: Conn,
    watchers: usize,
    start_revision: i64,
    events: u64,
    received: Arc<AtomicU64>,
}

impl Unsynced {
    /// Creates the watchers one after another and reads until each has its events. The error
    /// is why the stream could not go on.
    async fn run(self) -> Result<(), String> {
        if self.watchers == 0 {
            return Ok(());
        }
        // One create is in flight at a time, so the buffer never fills.
        let (mut tx, rx) = futures::channel::mpsc::channel(1);
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: Bytes::from_static(WATCH_KEY),
                start_revision: self.start_revision,
                ..Default::default()
            })),
        };
        let fail = |s: tonic::Status| {
            if is_fatal(&s) {
                format!("the server does not serve Watch ({})", status_text(&s))
            } else {
                format!("watch stream failed: {}", status_text(&s))
            }
        };
        let closed = || "watch stream closed".to_string();
        tx.send(create.clone()).await.map_err(|_| closed())?;
        let mut client = WatchClient::new(self.channel).max_decoding_message_size(MAX_RESPONSE);
        let mut responses = client.watch(rx).await.map_err(fail)?.into_inner();
        let mut created = 1;
        // Events seen per watch id; a watcher is done at `events`.
        let mut seen: HashMap<i64, u64> = HashMap::new();
        let mut done = 0;
        while done < self.watchers {
            let Some(r) = responses.message().await.map_err(fail)? else {
                return Err("watch stream closed by the server".to_string());
            };
            if r.canceled {
                return Err(format!("watch canceled: {}", r.cancel_reason));
            }
            if r.created && created < self.watchers {
                created += 1;
                tx.send(create.clone()).await.map_err(|_| closed())?;
            }
            if r.events.is_empty() {
                continue;
            }
            self.received.fetch_add(r.events.len() as u64, Ordering::Relaxed);
            let n = seen.entry(r.watch_id).or_default();
            let before = *n;
            *n += r.events.len() as u64;
            if before < self.events && *n >= self.events {
                done += 1;
            }
        }
        Ok(())
    }
}
