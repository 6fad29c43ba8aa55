//! The load loop shared by the request/response commands, and the stall watchdog.
//!
//! Each client is a tokio task that owns a [`Worker`] (its gRPC client on its connection and its
//! request state). Clients claim request numbers from one counter until `--total` is reached, so
//! the work spreads over them like etcd's shared request channel. With `--rate`, request `i` is
//! due at `start + i / rate`; its latency is measured from that intended time, not from when a
//! busy client got round to sending it, so a stalled server shows in the latencies (coordinated
//! omission). Every request runs under `--request-timeout`.

use crate::conn::{bounded, channel_for, connect, Conn, OpError};
use crate::output::Out;
use crate::progress::Progress;
use crate::report::Recorder;
use crate::settings::Settings;
use crate::stop::Stop;
use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

pub trait Worker: Send + 'static {
    /// Request number `i`: the index of the report it belongs to, and the request itself.
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_);
}

/// Stops the run when progress stalls: no success for `stall` while work was outstanding or
/// failing. `probe` returns (successes so far, whether requests are in flight or failing).
pub fn watchdog(
    stop: Stop,
    stall: Duration,
    what: &'static str,
    mut probe: impl FnMut() -> (u64, bool) + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let (mut last, mut since) = (probe().0, Instant::now());
        loop {
            tick.tick().await;
            let (progress, busy) = probe();
            if progress != last || !busy {
                (last, since) = (progress, Instant::now());
            } else if since.elapsed() >= stall {
                return stop.stop(format!(
                    "no {what} succeeded in the last {stall:?} (--stall-timeout): the endpoint stopped answering"
                ));
            }
        }
    })
}

#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub total: u64,
    /// Requests per second over all clients; `None` is as fast as the clients go.
    pub rate: Option<f64>,
    /// Show the progress bar (off when another bar covers this load).
    pub progress: bool,
    /// No request is sent after this time, even short of `total`; those in flight finish. A
    /// load that runs for a duration ends here while a server that fell behind still shows
    /// the backlog in its latencies.
    pub until: Option<Instant>,
}

impl Plan {
    /// `total` requests at `rate` per second (0 = no limit).
    pub fn new(total: u64, rate: u64) -> Self {
        Self { total, rate: (rate > 0).then_some(rate as f64), progress: true, until: None }
    }

    /// `rate` requests per second (fractions allowed; 0 is as fast as the clients go) for
    /// `duration`: the requests due before the end, none sent after it (a bar only with a rate).
    pub fn for_duration(rate: f64, duration: Duration) -> Self {
        let limited = rate > 0.0;
        let total = if limited { (rate * duration.as_secs_f64()).ceil() as u64 } else { u64::MAX };
        Self {
            total,
            rate: limited.then_some(rate),
            progress: limited,
            until: Some(Instant::now() + duration),
        }
    }

    pub fn quiet(self) -> Self {
        Self { progress: false, ..self }
    }
}

struct Shared {
    next: AtomicU64,
    inflight: AtomicI64,
    start: Instant,
    plan: Plan,
    recorders: Vec<Arc<Recorder>>,
    stop: Stop,
    timeout: Duration,
}

/// Runs `plan` over `workers` (one per client), recording into `recorders` (indexed by the
/// report number the workers return). Returns the run's wall time. Ends early when `stop` is set
/// (in-flight requests are dropped and not counted).
pub async fn run_load<W: Worker>(
    settings: &Settings,
    stop: &Stop,
    plan: Plan,
    recorders: &[Arc<Recorder>],
    workers: Vec<W>,
) -> Duration {
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        inflight: AtomicI64::new(0),
        start: Instant::now(),
        plan,
        recorders: recorders.to_vec(),
        stop: stop.clone(),
        timeout: settings.request_timeout,
    });
    let sum = |r: &[Arc<Recorder>], f: fn(&Recorder) -> u64| r.iter().map(|r| f(r)).sum::<u64>();
    let progress = {
        let s = shared.clone();
        Progress::start(settings, if plan.progress { plan.total } else { 0 }, move || {
            sum(&s.recorders, Recorder::completed)
        })
    };
    let dog = {
        let (s, mut last_failed) = (shared.clone(), 0);
        watchdog(stop.clone(), settings.stall_timeout, "request", move || {
            let ok = sum(&s.recorders, Recorder::succeeded);
            let failed = sum(&s.recorders, Recorder::completed) - ok;
            let failing = failed > last_failed;
            last_failed = failed;
            (ok, failing || s.inflight.load(Ordering::Relaxed) > 0)
        })
    };
    let handles: Vec<JoinHandle<()>> =
        workers.into_iter().map(|worker| tokio::spawn(client_loop(shared.clone(), worker))).collect();
    // On a stop, in-flight requests are dropped (not counted) and the clients end at once.
    let aborts: Vec<_> = handles.iter().map(|h| h.abort_handle()).collect();
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            stop.stopped().await;
            aborts.iter().for_each(|a| a.abort());
        })
    };
    for h in handles {
        if let Err(e) = h.await {
            if e.is_panic() {
                stop.stop(format!("a client task panicked: {e}"));
            }
        }
    }
    let elapsed = shared.start.elapsed();
    stopper.abort();
    dog.abort();
    progress.finish(sum(recorders, Recorder::completed));
    elapsed
}

/// [`run_load`] into one report named `name`, printed (or kept for the JSON) with `after`.
pub async fn run_report<W: Worker>(
    (settings, stop, out): (&Settings, &Stop, &Out),
    name: &str,
    plan: Plan,
    workers: Vec<W>,
    after: &str,
) {
    let rec = Arc::new(Recorder::new(name, settings.sample));
    let total = run_load(settings, stop, plan, std::slice::from_ref(&rec), workers).await;
    out.report("", rec.stats(total), after);
}

/// Connects, then [`run_report`] with one worker per client, made by `worker` from its
/// connection; the connections, `None` when they failed.
pub async fn run_clients<W: Worker>(
    (settings, stop, out): (&Settings, &Stop, &Out),
    name: &str,
    plan: Plan,
    after: &str,
    worker: impl FnMut(Conn) -> W,
) -> Option<Vec<Conn>> {
    let channels = connect(settings, stop, out, &[name]).await?;
    let workers = (0..settings.clients).map(|c| channel_for(&channels, c)).map(worker).collect();
    run_report((settings, stop, out), name, plan, workers, after).await;
    Some(channels)
}

async fn client_loop<W: Worker>(s: Arc<Shared>, mut worker: W) {
    // A stop aborts this task (see `run_load`), so the loop itself never waits on the signal:
    // one select and one wake-up less per request.
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if s.stop.is_stopped() || i >= s.plan.total {
            return;
        }
        let due =
            s.plan.rate.map_or_else(Instant::now, |rate| s.start + Duration::from_secs_f64(i as f64 / rate));
        if s.plan.until.is_some_and(|end| due > end) {
            return;
        }
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        s.inflight.fetch_add(1, Ordering::Relaxed);
        let (report, call) = worker.call(i);
        // Boxed once: the request future is large, and moving it through the timeout
        // combinator unboxed costs more than the allocation.
        let result = bounded(s.timeout, Box::pin(call)).await;
        s.inflight.fetch_sub(1, Ordering::Relaxed);
        let recorder = &s.recorders[report.min(s.recorders.len() - 1)];
        match result {
            Ok(()) => recorder.ok(due, Instant::now()),
            Err(e) => {
                recorder.err(&e.text);
                if e.fatal {
                    s.stop.stop(format!("the server does not serve this request ({})", e.text));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    struct Echo {
        fail_every: u64,
        delay: Duration,
    }

    impl Worker for Echo {
        fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
            let (delay, fail) = (self.delay, self.fail_every > 0 && i % self.fail_every == 0);
            (0, async move {
                tokio::time::sleep(delay).await;
                if fail {
                    Err(OpError::new("boom"))
                } else {
                    Ok(())
                }
            })
        }
    }

    fn echo(delay_ms: u64) -> Vec<Echo> {
        vec![Echo { fail_every: 0, delay: Duration::from_millis(delay_ms) }]
    }

    fn settings() -> Settings {
        let args = ["--endpoints=127.0.0.1:1", "--clients=4", "--json", "--request-timeout=200ms"];
        let global: crate::settings::Global = crate::execute::parse_flags(&args).expect("parses");
        global.settings().expect("valid")
    }

    async fn run(plan: Plan, stop: &Stop, workers: Vec<impl Worker>) -> (Arc<Recorder>, Duration) {
        let rec = Arc::new(Recorder::new("t", false));
        let took = run_load(&settings(), stop, plan, std::slice::from_ref(&rec), workers).await;
        (rec, took)
    }

    #[tokio::test]
    async fn runs_the_total_over_clients_and_counts_errors() {
        let workers: Vec<Echo> = (0..4).map(|_| Echo { fail_every: 10, delay: Duration::ZERO }).collect();
        let stop = Stop::new();
        let s = run(Plan::new(100, 0), &stop, workers).await.0.stats(Duration::from_secs(1));
        assert_eq!((s.requests, s.errors), (90, 10));
        assert!(stop.reason().is_none());
    }

    #[tokio::test]
    async fn rate_spaces_requests_and_timeouts_count() {
        // 5 requests at 50/s: the last is due at 80 ms.
        let (rec, elapsed) = run(Plan::new(5, 50), &Stop::new(), echo(0)).await;
        assert!(elapsed >= Duration::from_millis(80), "{elapsed:?}");
        assert_eq!(rec.succeeded(), 5);
        let s = run(Plan::new(2, 0), &Stop::new(), echo(5000)).await.0.stats(Duration::from_secs(1));
        assert_eq!(s.errors, 2);
        assert!(s.error_distribution[0].error.contains("timed out"));
    }

    #[tokio::test]
    async fn coordinated_omission_measures_from_the_intended_time() {
        // One client, 10 requests at 100/s, each taking 50 ms: request i is due at 10·i ms but
        // can only start at 50·i ms, so its latency grows to ~50 + 40·i ms.
        let s = run(Plan::new(10, 100), &Stop::new(), echo(50)).await.0.stats(Duration::from_secs(1));
        assert!(s.slowest_secs > 0.35, "slowest {}", s.slowest_secs);
    }

    #[tokio::test]
    async fn fatal_errors_stop_the_run() {
        struct Unimpl;
        impl Worker for Unimpl {
            fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
                (0, async { Err(Status::unimplemented("no Lease").into()) })
            }
        }
        let stop = Stop::new();
        let (rec, _) = run(Plan::new(1000, 0), &stop, vec![Unimpl]).await;
        assert!(rec.completed() < 1000);
        assert!(stop.reason().unwrap_or_default().contains("Unimplemented"));
    }
}
