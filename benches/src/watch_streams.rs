//! Watch streams as the watch commands use them: opening a stream and creating its watches one
//! after another (a creation's latency runs from sending the create request to its `created`
//! response), then receiving events for puts whose value starts with their send time
//! (nanoseconds since the put phase began, little-endian), so an event's latency is measured
//! from the put's send to the event's arrival, per watcher.
//!
//! Against a server without the Watch service the stream fails with UNIMPLEMENTED: the creation
//! report counts the failed watches and the command stops with that reason.

use crate::conn::{bounded, channel_for, kv_client, status_text, Conn, OpError, MAX_RESPONSE};
use crate::output::Out;
use crate::progress::Progress;
use crate::report::Recorder;
use crate::runner::{run_load, watchdog, Plan, Worker};
use crate::settings::Settings;
use crate::stamped_events::{self, StampedResponse};
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::watch_request::RequestUnion;
use actcd_proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest};
use bytes::Bytes;
use futures::channel::mpsc::{self, Sender};
use futures::{SinkExt, StreamExt};
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::Streaming;

/// Checks the sizes of puts that carry their send time: a key of at least one byte, a value
/// of at least the time's 8.
pub fn check_stamped_puts(key_size: usize, val_size: usize) -> Result<(), String> {
    if key_size < 1 {
        return Err("--key-size must be at least 1".to_string());
    }
    if val_size < 8 {
        return Err(format!(
            "--val-size must be at least 8 (the put's send time travels in the value), got {val_size}"
        ));
    }
    Ok(())
}

/// The watchers (numbered across all streams, in order) on stream `s` when `watchers` spread
/// evenly over `streams` (the first streams take one more when it does not divide).
pub fn watchers_on(s: usize, watchers: usize, streams: usize) -> Range<usize> {
    let (per, extra) = (watchers / streams, watchers % streams);
    let first = s * per + s.min(extra);
    first..first + per + usize::from(s < extra)
}

/// Events that `puts` puts to `keys` keys in turn (put i to key i mod keys) make for `watchers`
/// (watcher g watches key g mod keys).
pub fn expected_events(watchers: impl Iterator<Item = usize>, keys: usize, puts: u64) -> u64 {
    let mut per_key = vec![0u64; keys];
    watchers.for_each(|g| per_key[g % keys] += 1);
    let n = keys as u64;
    per_key.iter().enumerate().map(|(k, w)| w * (puts / n + u64::from((k as u64) < puts % n))).sum()
}

pub struct OpenStream {
    pub index: usize,
    /// Kept so the client side of the stream stays open.
    requests: Sender<WatchRequest>,
    responses: Streaming<StampedResponse>,
}

/// A create request of a watch on `key` from now on.
pub fn create_request(key: Bytes, prev_kv: bool, start_revision: i64) -> WatchRequest {
    let create = WatchCreateRequest { key, prev_kv, start_revision, ..Default::default() };
    WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }
}

/// Opens stream `index` on `channel` and creates a watch on each of `keys` (with prev_kv or
/// not), one at a time, each within `timeout`, recording each creation in `rec`. Returns the
/// open stream, or `None` when it failed (the watches not created are counted as errors).
async fn open_stream(
    (index, channel, keys): (usize, Conn, Vec<Bytes>),
    (prev_kv, timeout): (bool, Duration),
    rec: &Recorder,
    stop: &Stop,
) -> Option<OpenStream> {
    let fail = |from: usize, e: OpError| {
        (from..keys.len()).for_each(|_| rec.err(&e.text));
        if e.fatal {
            stop.stop(format!("the server does not serve Watch ({})", e.text));
        }
        None
    };
    let create = |w: usize| create_request(keys.get(w).cloned().unwrap_or_default(), prev_kv, 0);
    // One request in flight: a create is sent only once the previous one's `created` has come
    // back, so a send never waits; if one did, it would wait rather than queue.
    let (mut tx, rx) = mpsc::channel(1);
    // The first create goes out with the call: a gRPC server may hold the stream's response
    // headers until it has something to answer.
    let mut sent = Instant::now();
    if tx.send(create(0)).await.is_err() {
        return fail(0, OpError::new("watch stream closed"));
    }
    let mut responses = match bounded(timeout, stamped_events::watch(channel, MAX_RESPONSE, rx)).await {
        Ok(r) => r,
        Err(e) => return fail(0, e),
    };
    for w in 0..keys.len() {
        if stop.is_stopped() {
            return None;
        }
        if w > 0 {
            sent = Instant::now();
            if tx.send(create(w)).await.is_err() {
                return fail(w, OpError::new("watch stream closed"));
            }
        }
        match bounded(timeout, responses.message()).await {
            Ok(Some(r)) if r.canceled => rec.err(&format!("watch canceled: {}", r.cancel_reason)),
            Ok(Some(r)) if r.created => rec.ok(sent, Instant::now()),
            Ok(Some(_)) => rec.err("unexpected watch response before created"),
            Ok(None) => return fail(w, OpError::new("watch stream closed by the server")),
            Err(e) => return fail(w, e),
        }
    }
    Some(OpenStream { index, requests: tx, responses })
}

/// Opens `streams` streams (stream `s` on client `s mod clients`), `concurrency` at a time,
/// creating on stream `s` the watches `keys_of(s)` lists (`watches` in all), with progress and
/// a stall watchdog over them. Prints the creation report when `always_report`, or when a
/// creation failed. Returns the streams that opened (the run is stopped when none did) and the
/// watches created.
pub async fn open_streams(
    (settings, stop, out): (&Settings, &Stop, &Out),
    channels: &[Conn],
    (streams, watches, concurrency): (usize, u64, usize),
    keys_of: impl Fn(usize) -> Vec<Bytes>,
    (prev_kv, always_report): (bool, bool),
) -> (Vec<OpenStream>, u64) {
    let rec = Arc::new(Recorder::new("watch-create", settings.sample));
    let (start, opening) = (Instant::now(), Arc::new(AtomicBool::new(true)));
    let progress = {
        let r = rec.clone();
        Progress::start(settings, watches, move || r.completed())
    };
    let dog = {
        let (r, opening) = (rec.clone(), opening.clone());
        watchdog(stop.clone(), settings.stall_timeout, "watch creation", move || {
            (r.completed(), opening.load(Ordering::Relaxed))
        })
    };
    let plan = (prev_kv, settings.request_timeout);
    let mut opened = futures::stream::iter(0..streams)
        .take_while(|_| futures::future::ready(!stop.is_stopped()))
        .map(|s| {
            let (channel, keys, rec) = (channel_for(channels, s % settings.clients), keys_of(s), rec.clone());
            async move { open_stream((s, channel, keys), plan, &rec, stop).await }
        })
        .buffer_unordered(concurrency);
    let mut open = Vec::with_capacity(streams);
    // A stop starts no more streams and gives those being opened a second to end (a fatal
    // error reaches them all at once, and their failures count).
    tokio::select! {
        _ = async { while let Some(stream) = opened.next().await { open.extend(stream) } } => {}
        _ = async { stop.stopped().await; tokio::time::sleep(Duration::from_secs(1)).await } => {}
    }
    drop(opened);
    opening.store(false, Ordering::Relaxed);
    dog.abort();
    open.sort_by_key(|s| s.index);
    progress.finish(rec.completed());
    let created = rec.stats(start.elapsed());
    if always_report || created.errors > 0 || open.is_empty() {
        out.report("Watch creation summary:\n", created, "");
    }
    if open.is_empty() {
        stop.stop("no watch stream could be opened");
    }
    (open, rec.succeeded())
}

/// Receives events on `stream` until `remaining` reaches zero, recording each event's latency
/// from the send time its value carries (`base` + nanoseconds).
async fn receive_events(
    mut stream: OpenStream,
    rec: Arc<Recorder>,
    remaining: Arc<AtomicI64>,
    base: Instant,
    done: Arc<watch::Sender<bool>>,
) -> Sender<WatchRequest> {
    loop {
        let r = match stream.responses.message().await {
            Ok(Some(r)) => r,
            Ok(None) => {
                rec.err("watch stream closed by the server");
                return stream.requests;
            }
            Err(status) => {
                rec.err(&status_text(&status));
                return stream.requests;
            }
        };
        let now = Instant::now();
        if r.canceled {
            rec.err(&format!("watch canceled: {}", r.cancel_reason));
        }
        for ev in &r.events {
            let sent = ev.stamp().map(|b| base + Duration::from_nanos(u64::from_le_bytes(b)));
            rec.ok(sent.filter(|t| *t <= now).unwrap_or(now), now);
            if remaining.fetch_sub(1, Ordering::AcqRel) <= 1 {
                done.send_replace(true);
                return stream.requests;
            }
        }
    }
}

/// Puts whose value starts with the send time (nanoseconds since `base`, little-endian).
struct StampedPutWorker {
    kv: KvClient<Conn>,
    keys: Arc<Vec<Bytes>>,
    base: Instant,
    value_size: usize,
}

fn stamped_value(base: Instant, size: usize) -> Bytes {
    let ns = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut v = ns.to_le_bytes().to_vec();
    v.resize(size.max(8), b'x');
    Bytes::from(v)
}

impl Worker for StampedPutWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let key = self.keys[(i % self.keys.len() as u64) as usize].clone();
        let req = PutRequest { key, value: stamped_value(self.base, self.value_size), ..Default::default() };
        (0, async move { self.kv.put(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

/// The event phase of the watch commands: receivers on every stream, `put_total` puts to
/// `keys` (in turn) at `put_rate` (0: no limit), one putter per channel of `put_channels`, with
/// values of `value_size` bytes, until `expected` events arrived (or the run stops).
pub struct EventPhase {
    pub keys: Arc<Vec<Bytes>>,
    pub put_total: u64,
    pub put_rate: u64,
    pub put_channels: Vec<Conn>,
    pub value_size: usize,
    pub expected: u64,
}

/// Runs `phase` over `streams`. Returns the event recorder, the put recorder and the phase's
/// wall time.
pub async fn run_events(
    settings: &Settings,
    stop: &Stop,
    streams: Vec<OpenStream>,
    phase: EventPhase,
) -> (Arc<Recorder>, Arc<Recorder>, Duration) {
    let events = Arc::new(Recorder::new("watch", settings.sample));
    let puts = Arc::new(Recorder::new("put", settings.sample));
    let remaining = Arc::new(AtomicI64::new(i64::try_from(phase.expected).unwrap_or(i64::MAX)));
    // Nothing to wait for when no event is expected (no puts, or no watcher on their keys).
    let done = Arc::new(watch::channel(phase.expected == 0).0);
    let base = Instant::now();
    let mut receivers = JoinSet::new();
    for s in streams {
        receivers.spawn(receive_events(s, events.clone(), remaining.clone(), base, done.clone()));
    }
    let progress = {
        let r = events.clone();
        Progress::start(settings, phase.expected, move || r.completed())
    };
    let dog = {
        let (r, remaining) = (events.clone(), remaining.clone());
        watchdog(stop.clone(), settings.stall_timeout, "watch event", move || {
            (r.succeeded(), remaining.load(Ordering::Relaxed) > 0)
        })
    };
    let workers: Vec<StampedPutWorker> = phase
        .put_channels
        .iter()
        .map(|c| StampedPutWorker {
            kv: kv_client(c.clone()),
            keys: phase.keys.clone(),
            base,
            value_size: phase.value_size,
        })
        .collect();
    let plan = Plan::new(phase.put_total, phase.put_rate).quiet();
    run_load(settings, stop, plan, std::slice::from_ref(&puts), workers).await;
    // Wait for the events: all arrived, every receiver ended, or the run stopped. The request
    // sides of the ended streams stay open until then.
    let mut done_rx = done.subscribe();
    let mut senders = Vec::new();
    loop {
        tokio::select! {
            _ = done_rx.wait_for(|d| *d) => break,
            _ = stop.stopped() => break,
            next = receivers.join_next() => match next {
                Some(Ok(tx)) => senders.push(tx),
                Some(Err(_)) => {}
                None => break,
            },
        }
    }
    let took = base.elapsed();
    receivers.abort_all();
    drop(senders);
    dog.abort();
    progress.finish(events.completed());
    (events, puts, took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_spread_evenly_over_streams() {
        assert_eq!((0..100).map(|s| watchers_on(s, 1000, 100).len()).sum::<usize>(), 1000);
        assert_eq!(
            (0..7).map(|s| watchers_on(s, 1000, 7).len()).collect::<Vec<_>>(),
            vec![143, 143, 143, 143, 143, 143, 142]
        );
        assert_eq!((watchers_on(0, 1, 1), watchers_on(6, 1000, 7)), (0..1, 858..1000));
        // One key: every put reaches every watcher.
        assert_eq!(expected_events([0, 4, 5, 6].into_iter(), 1, 7), 4 * 7);
        // Puts that do not divide over the keys: keys 0 and 1 get 2 puts, key 2 gets 1.
        assert_eq!(expected_events(0..6, 3, 5), 2 * 2 + 2 * 2 + 2);
    }

    #[test]
    fn stamped_values_carry_the_send_time() {
        let base = Instant::now() - Duration::from_millis(5);
        let v = stamped_value(base, 32);
        assert_eq!(v.len(), 32);
        let ns = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
        assert!(ns >= 5_000_000, "{ns}");
        assert_eq!(stamped_value(base, 0).len(), 8);
    }
}
