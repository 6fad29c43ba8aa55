//! `watch`, `watch-latency` and `watch-fanout`.
//!
//! Both open `--streams` Watch streams spread over the clients (and so over the connections),
//! create their watches one after another on each stream (a creation's latency runs from sending
//! the create request to its `created` response), then put to the watched keys. Each put's value
//! starts with its send time (nanoseconds since the put phase began, little-endian), so an
//! event's latency is measured from the put's send to the event's arrival, per watcher.
//!
//! `watch-fanout` is watch-latency turned to throughput: `--watchers` watchers of one key spread
//! evenly over `--streams` streams, `--put-clients` concurrent putters (unthrottled by default),
//! and the report's figure is events delivered per second, from the first put to the last event.
//!
//! Against a server without the Watch service the stream fails with UNIMPLEMENTED: the creation
//! report counts the failed watches and the command stops with that reason.

use super::put::{kv_client, MAX_RESPONSE};
use super::{channel_for, check_key_space, connect};
use crate::cli::{WatchArgs, WatchFanoutArgs, WatchLatencyArgs};
use crate::conn::{is_fatal, status_text};
use crate::keys::{varint_key, Rng};
use crate::report::Recorder;
use crate::runner::{run_load, watchdog, OpError, Out, Plan, Progress, Settings, Stop, Worker};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::watch_request::RequestUnion;
use actcd_proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest, WatchResponse};
use bytes::Bytes;
use futures::channel::mpsc::{unbounded, UnboundedSender};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::transport::Channel;
use tonic::Streaming;

/// Checks `watch`'s flags.
pub fn validate_watch(a: &WatchArgs) -> Result<(), String> {
    if a.streams == 0 || a.watch_per_stream == 0 || a.watched_key_total == 0 {
        return Err("--streams, --watch-per-stream and --watched-key-total must be at least 1".to_string());
    }
    check_key_space(a.key_size, a.key_space_size)?;
    if a.key_size < 1 {
        return Err("--key-size must be at least 1".to_string());
    }
    Ok(())
}

/// Checks `watch-latency`'s flags.
pub fn validate_latency(a: &WatchLatencyArgs) -> Result<(), String> {
    if a.streams == 0 || a.watchers_per_stream == 0 {
        return Err("--streams and --watchers-per-stream must be at least 1".to_string());
    }
    if a.key_size < 1 {
        return Err("--key-size must be at least 1".to_string());
    }
    if a.val_size < 8 {
        return Err(format!(
            "--val-size must be at least 8 (the put's send time travels in the value), got {}",
            a.val_size
        ));
    }
    Ok(())
}

/// Checks `watch-fanout`'s flags.
pub fn validate_fanout(a: &WatchFanoutArgs) -> Result<(), String> {
    if a.watchers == 0 || a.streams == 0 || a.put_clients == 0 {
        return Err("--watchers, --streams and --put-clients must be at least 1".to_string());
    }
    if a.streams > a.watchers {
        return Err(format!(
            "--streams {} is more than --watchers {}: a stream would watch nothing",
            a.streams, a.watchers
        ));
    }
    if a.key_size < 1 {
        return Err("--key-size must be at least 1".to_string());
    }
    if a.val_size < 8 {
        return Err(format!(
            "--val-size must be at least 8 (the put's send time travels in the value), got {}",
            a.val_size
        ));
    }
    Ok(())
}

/// Watchers on stream `s` when `watchers` spread evenly over `streams` (the first streams take
/// one more when it does not divide).
pub fn watchers_on(s: usize, watchers: usize, streams: usize) -> usize {
    watchers / streams + usize::from(s < watchers % streams)
}

/// An open Watch stream whose watches are created.
pub(crate) struct OpenStream {
    index: usize,
    /// Kept so the client side of the stream stays open.
    requests: UnboundedSender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

fn create_request(key: Bytes, prev_kv: bool) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key,
            prev_kv,
            ..Default::default()
        })),
    }
}

/// What opening streams needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamPlan {
    /// Ask for the previous key-value with each event.
    pub prev_kv: bool,
    /// Bound on opening the stream and on each create.
    pub timeout: Duration,
}

/// Opens stream `index` on `channel` and creates a watch on each of `keys`, one at a time,
/// recording each creation in `rec`. Returns the open stream, or `None` when it failed (the
/// watches not created are counted as errors).
pub(crate) async fn open_stream(
    index: usize,
    channel: Channel,
    keys: Vec<Bytes>,
    plan: &StreamPlan,
    rec: &Recorder,
    stop: &Stop,
) -> Option<OpenStream> {
    let fail_rest = |from: usize, error: &str| {
        for _ in from..keys.len() {
            rec.err(index, error);
        }
    };
    let (tx, rx) = unbounded();
    let mut client = WatchClient::new(channel).max_decoding_message_size(MAX_RESPONSE);
    let first = keys.first().cloned().unwrap_or_default();
    // The first create goes out with the call: a gRPC server may hold the stream's response
    // headers until it has something to answer.
    let mut sent = Instant::now();
    if tx.unbounded_send(create_request(first, plan.prev_kv)).is_err() {
        fail_rest(0, "watch stream closed");
        return None;
    }
    let mut responses = match tokio::time::timeout(plan.timeout, client.watch(rx)).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(status)) => {
            fail_rest(0, &status_text(&status));
            if is_fatal(&status) {
                stop.stop(format!("the server does not serve Watch ({})", status_text(&status)));
            }
            return None;
        }
        Err(_) => {
            fail_rest(0, &format!("opening the watch stream timed out after {:?}", plan.timeout));
            return None;
        }
    };
    for (w, key) in keys.iter().enumerate() {
        if stop.is_stopped() {
            return None;
        }
        if w > 0 {
            sent = Instant::now();
            if tx.unbounded_send(create_request(key.clone(), plan.prev_kv)).is_err() {
                fail_rest(w, "watch stream closed");
                return None;
            }
        }
        match tokio::time::timeout(plan.timeout, responses.message()).await {
            Ok(Ok(Some(r))) if r.created && !r.canceled => rec.ok(index, sent, Instant::now()),
            Ok(Ok(Some(r))) if r.canceled => {
                rec.err(index, &format!("watch canceled: {}", r.cancel_reason));
            }
            Ok(Ok(Some(_))) => rec.err(index, "unexpected watch response before created"),
            Ok(Ok(None)) => {
                fail_rest(w, "watch stream closed by the server");
                return None;
            }
            Ok(Err(status)) => {
                fail_rest(w, &status_text(&status));
                if is_fatal(&status) {
                    stop.stop(format!("the server does not serve Watch ({})", status_text(&status)));
                }
                return None;
            }
            Err(_) => {
                fail_rest(w, &format!("watch creation timed out after {:?}", plan.timeout));
                return None;
            }
        }
    }
    Some(OpenStream { index, requests: tx, responses })
}

/// Opens `streams` streams (stream `s` on client `s mod clients`), creating on each the watches
/// `keys_of(s)` lists. Shows progress over all watches. Returns the open streams and the
/// creation recorder.
async fn open_streams(
    settings: &Settings,
    stop: &Stop,
    channels: &[Channel],
    streams: usize,
    keys_of: impl Fn(usize) -> Vec<Bytes>,
    plan: StreamPlan,
) -> (Vec<OpenStream>, Arc<Recorder>, Duration) {
    let rec = Arc::new(Recorder::new("watch-create", streams, settings.sample));
    let total: u64 = (0..streams).map(|s| keys_of(s).len() as u64).sum();
    let progress = {
        let r = rec.clone();
        Progress::start(settings, total, move || r.completed())
    };
    let start = Instant::now();
    let plan = Arc::new(plan);
    let mut set = JoinSet::new();
    for s in 0..streams {
        let channel = channel_for(channels, s % settings.clients);
        let keys = keys_of(s);
        let (plan, rec, stop) = (plan.clone(), rec.clone(), stop.clone());
        set.spawn(async move { open_stream(s, channel, keys, &plan, &rec, &stop).await });
    }
    let mut open = Vec::with_capacity(streams);
    while let Some(r) = set.join_next().await {
        if let Ok(Some(s)) = r {
            open.push(s);
        }
    }
    open.sort_by_key(|s| s.index);
    let took = start.elapsed();
    progress.finish(rec.completed());
    (open, rec, took)
}

/// Receives events on `stream` until `remaining` reaches zero, recording each event's latency
/// from the send time its value carries (`base` + nanoseconds).
async fn receive_events(
    mut stream: OpenStream,
    rec: Arc<Recorder>,
    remaining: Arc<AtomicI64>,
    base: Instant,
    done: Arc<watch::Sender<bool>>,
) -> UnboundedSender<WatchRequest> {
    loop {
        match stream.responses.message().await {
            Ok(Some(r)) => {
                let now = Instant::now();
                if r.canceled {
                    rec.err(stream.index, &format!("watch canceled: {}", r.cancel_reason));
                }
                for ev in &r.events {
                    let sent = ev
                        .kv
                        .as_ref()
                        .and_then(|kv| kv.value.get(..8))
                        .and_then(|b| <[u8; 8]>::try_from(b).ok())
                        .map(|b| base + Duration::from_nanos(u64::from_le_bytes(b)))
                        .filter(|t| *t <= now)
                        .unwrap_or(now);
                    rec.ok(stream.index, sent, now);
                    if remaining.fetch_sub(1, Ordering::AcqRel) <= 1 {
                        done.send_replace(true);
                        return stream.requests;
                    }
                }
            }
            Ok(None) => {
                rec.err(stream.index, "watch stream closed by the server");
                return stream.requests;
            }
            Err(status) => {
                rec.err(stream.index, &status_text(&status));
                return stream.requests;
            }
        }
    }
}

/// Puts whose value starts with the send time (nanoseconds since `base`, little-endian).
struct StampedPutWorker {
    kv: KvClient<Channel>,
    keys: Arc<Vec<Bytes>>,
    base: Instant,
    value_size: usize,
}

fn stamped_value(base: Instant, size: usize) -> Bytes {
    let ns = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut v = Vec::with_capacity(size.max(8));
    v.extend_from_slice(&ns.to_le_bytes());
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

/// The event phase shared by both commands: receivers on every stream, puts of `put_total`
/// to `keys` at `put_rate` from `put_clients` workers, until `expected` events arrived (or the
/// run stops). Returns the event recorder, the put recorder and the phase's wall time.
struct EventPhase {
    keys: Arc<Vec<Bytes>>,
    put_total: u64,
    put_rate: u64,
    put_channels: Vec<Channel>,
    value_size: usize,
    expected: u64,
}

async fn run_events(
    settings: &Settings,
    stop: &Stop,
    streams: Vec<OpenStream>,
    phase: EventPhase,
) -> (Arc<Recorder>, Arc<Recorder>, Duration) {
    let events = Arc::new(Recorder::new("watch", streams.len(), settings.sample));
    let puts = Arc::new(Recorder::new("put", phase.put_channels.len(), settings.sample));
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
    run_load(
        settings,
        stop,
        Plan::new(phase.put_total, phase.put_rate).quiet(),
        std::slice::from_ref(&puts),
        workers,
    )
    .await;
    // Wait for the events: all arrived, every receiver ended, or the run stopped.
    let mut done_rx = done.subscribe();
    let mut stop_rx = stop.subscribe();
    let mut senders = Vec::new();
    loop {
        tokio::select! {
            _ = done_rx.wait_for(|d| *d) => break,
            _ = Stop::stopped(&mut stop_rx) => break,
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

fn note_put_errors(out: &Out, puts: &Recorder) {
    let s = puts.stats(Duration::ZERO);
    for e in &s.error_distribution {
        out.note(format!("warning: [{}] puts failed: {}", e.count, e.error));
    }
}

/// Runs `watch`.
pub async fn run_watch(settings: &Settings, stop: &Stop, out: &Out, a: WatchArgs) {
    let grpc_conns = settings.clients.min(settings.conns);
    let wanted = 1 + a.streams / 100;
    if grpc_conns < wanted {
        out.note(format!(
            "warning: grpc limits 100 streams per client connection, have {grpc_conns} but need {wanted}"
        ));
    }
    let Some(channels) = connect(settings, stop, out, &["watch-create"]).await else {
        return;
    };
    let mut rng = Rng::seeded(0);
    let keys: Vec<Bytes> = (0..a.watched_key_total)
        .map(|i| {
            let n = if a.sequential_keys { i as u64 % a.key_space_size } else { rng.below(a.key_space_size) };
            Bytes::from(varint_key(n, a.key_size))
        })
        .collect();
    // Watch g (stream g / per-stream, in order) watches keys[g mod keys].
    let per = a.watch_per_stream;
    let mut watchers_of = vec![0u64; keys.len()];
    for g in 0..a.streams * per {
        watchers_of[g % keys.len()] += 1;
    }
    let keys_of =
        |s: usize| -> Vec<Bytes> { (s * per..(s + 1) * per).map(|g| keys[g % keys.len()].clone()).collect() };
    let (streams, created, took) = open_streams(
        settings,
        stop,
        &channels,
        a.streams,
        keys_of,
        StreamPlan { prev_kv: false, timeout: settings.request_timeout },
    )
    .await;
    out.report("Watch creation summary:\n", created.stats(took), "");
    if streams.is_empty() || stop.is_stopped() {
        if !stop.is_stopped() {
            stop.stop("no watch stream could be opened");
        }
        return;
    }
    // Events expected: for each put, the watchers of its key, on the streams that opened.
    let opened: std::collections::HashSet<usize> = streams.iter().map(|s| s.index).collect();
    let mut live_watchers = vec![0u64; keys.len()];
    for g in 0..a.streams * per {
        if opened.contains(&(g / per)) {
            live_watchers[g % keys.len()] += 1;
        }
    }
    let expected: u64 = (0..a.put_total).map(|i| live_watchers[(i % keys.len() as u64) as usize]).sum();
    let phase = EventPhase {
        keys: Arc::new(keys),
        put_total: a.put_total,
        put_rate: a.put_rate,
        put_channels: (0..settings.clients).map(|c| channel_for(&channels, c)).collect(),
        value_size: 8,
        expected,
    };
    let (events, puts, took) = run_events(settings, stop, streams, phase).await;
    out.extra("events_expected", expected.into());
    out.report("Watch events received summary:\n", events.stats(took), "");
    note_put_errors(out, &puts);
}

/// Runs `watch-latency`.
pub async fn run_latency(settings: &Settings, stop: &Stop, out: &Out, a: WatchLatencyArgs) {
    let Some(channels) = connect(settings, stop, out, &["watch-create"]).await else {
        return;
    };
    let key = Bytes::from(Rng::seeded(0).bytes(a.key_size));
    let per = a.watchers_per_stream;
    let k = key.clone();
    let (streams, created, took) = open_streams(
        settings,
        stop,
        &channels,
        a.streams,
        move |_| vec![k.clone(); per],
        StreamPlan { prev_kv: a.prevkv, timeout: settings.request_timeout },
    )
    .await;
    let create_stats = created.stats(took);
    if create_stats.errors > 0 || streams.is_empty() {
        out.report("Watch creation summary:\n", create_stats, "");
    }
    if streams.is_empty() || stop.is_stopped() {
        if !stop.is_stopped() {
            stop.stop("no watch stream could be opened");
        }
        return;
    }
    let expected = a.put_total * (streams.len() * per) as u64;
    let phase = EventPhase {
        keys: Arc::new(vec![key]),
        put_total: a.put_total,
        put_rate: a.put_rate,
        // One putter, like etcd's: puts go out one after another at --put-rate.
        put_channels: vec![channels[0].clone()],
        value_size: a.val_size,
        expected,
    };
    let (events, puts, took) = run_events(settings, stop, streams, phase).await;
    out.report("Put summary:\n", puts.stats(took), "");
    out.report("Watch events summary:\n", events.stats(took), "");
}

/// Runs `watch-fanout`.
pub async fn run_fanout(settings: &Settings, stop: &Stop, out: &Out, a: WatchFanoutArgs) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_spread_evenly_over_streams() {
        assert_eq!((0..100).map(|s| watchers_on(s, 1000, 100)).sum::<usize>(), 1000);
        assert_eq!(
            (0..7).map(|s| watchers_on(s, 1000, 7)).collect::<Vec<_>>(),
            vec![143, 143, 143, 143, 143, 143, 142]
        );
        assert_eq!(watchers_on(0, 1, 1), 1);
    }

    #[test]
    fn stamped_values_carry_the_send_time() {
        let base = Instant::now() - Duration::from_millis(5);
        let v = stamped_value(base, 32);
        assert_eq!(v.len(), 32);
        let mut b = [0u8; 8];
        b.copy_from_slice(&v[..8]);
        let ns = u64::from_le_bytes(b);
        assert!(ns >= 5_000_000, "{ns}");
        assert_eq!(stamped_value(base, 0).len(), 8);
    }
}
