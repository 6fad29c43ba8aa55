//! The load loop shared by the request/response commands, and the stall watchdog.
//!
//! Each client is a tokio task that owns a [`Worker`] (its gRPC client on its connection and its
//! request state). Clients claim request numbers from one counter until `--total` is reached, so
//! the work spreads over them like etcd's shared request channel. With `--rate`, request `i` is
//! due at `start + i / rate`; its latency is measured from that intended time, not from when a
//! busy client got round to sending it, so a stalled server shows in the latencies (coordinated
//! omission). Every request runs under `--request-timeout`.

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
use tonic::Status;

/// Why a request failed, as the error distribution shows it.
#[derive(Debug, Clone)]
pub struct OpError {
    /// The text counted in the error distribution.
    pub text: String,
    /// The server will never serve this request (UNIMPLEMENTED): stop the run.
    pub fatal: bool,
}

impl OpError {
    /// A non-fatal error with `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into(), fatal: false }
    }
}

impl From<Status> for OpError {
    fn from(s: Status) -> Self {
        Self { text: crate::conn::status_text(&s), fatal: crate::conn::is_fatal(&s) }
    }
}

/// One client's requests.
pub trait Worker: Send + 'static {
    /// Request number `i`: which report it belongs to, and the request itself.
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
        let mut last = probe().0;
        let mut since = Instant::now();
        loop {
            tick.tick().await;
            let (progress, busy) = probe();
            if progress != last || !busy {
                last = progress;
                since = Instant::now();
            } else if since.elapsed() >= stall {
                stop.stop(format!(
                    "no {what} succeeded in the last {:?} (--stall-timeout): the endpoint stopped answering",
                    stall
                ));
                return;
            }
        }
    })
}

/// How many requests, and how fast.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Requests in all.
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
    /// `duration`: the requests due before the end, none sent after it.
    pub fn for_duration(rate: f64, duration: Duration) -> Self {
        let until = Some(Instant::now() + duration);
        if rate > 0.0 {
            let total = (rate * duration.as_secs_f64()).ceil() as u64;
            Self { total, rate: Some(rate), progress: true, until }
        } else {
            Self { total: u64::MAX, rate: None, progress: false, until }
        }
    }

    /// The same plan without a progress bar.
    pub fn quiet(self) -> Self {
        Self { progress: false, ..self }
    }
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
    let recorders: Arc<[Arc<Recorder>]> = recorders.iter().cloned().collect();
    let next = Arc::new(AtomicU64::new(0));
    let inflight = Arc::new(AtomicI64::new(0));
    let start = Instant::now();

    let progress = {
        let r = recorders.clone();
        let total = if plan.progress { plan.total } else { 0 };
        Progress::start(settings, total, move || r.iter().map(|r| r.completed()).sum())
    };
    let dog = {
        let r = recorders.clone();
        let inflight = inflight.clone();
        let mut last_completed = 0;
        watchdog(stop.clone(), settings.stall_timeout, "request", move || {
            let ok: u64 = r.iter().map(|r| r.succeeded()).sum();
            let done: u64 = r.iter().map(|r| r.completed()).sum();
            let failing = done - ok > last_completed;
            last_completed = done - ok;
            (ok, failing || inflight.load(Ordering::Relaxed) > 0)
        })
    };

    let handles: Vec<JoinHandle<()>> = workers
        .into_iter()
        .enumerate()
        .map(|(client, worker)| {
            let ctx = ClientCtx {
                client,
                next: next.clone(),
                inflight: inflight.clone(),
                start,
                plan,
                recorders: recorders.clone(),
                stop: stop.clone(),
                timeout: settings.request_timeout,
            };
            tokio::spawn(client_loop(ctx, worker))
        })
        .collect();
    // On a stop, in-flight requests are dropped (not counted) and the clients end at once.
    let aborts: Vec<tokio::task::AbortHandle> = handles.iter().map(|h| h.abort_handle()).collect();
    let stopper = {
        let mut rx = stop.subscribe();
        tokio::spawn(async move {
            Stop::stopped(&mut rx).await;
            for a in aborts {
                a.abort();
            }
        })
    };
    for h in handles {
        if let Err(e) = h.await {
            if e.is_panic() {
                stop.stop(format!("a client task panicked: {e}"));
            }
        }
    }
    let elapsed = start.elapsed();
    stopper.abort();
    dog.abort();
    progress.finish(recorders.iter().map(|r| r.completed()).sum());
    elapsed
}

/// [`run_load`] into one report named `name`, printed (or kept for the JSON) with `after`.
pub async fn run_report<W: Worker>(
    settings: &Settings,
    stop: &Stop,
    out: &Out,
    name: &str,
    plan: Plan,
    workers: Vec<W>,
    after: &str,
) {
    let rec = Arc::new(Recorder::new(name, settings.clients, settings.sample));
    let total = run_load(settings, stop, plan, std::slice::from_ref(&rec), workers).await;
    out.report("", rec.stats(total), after);
}

struct ClientCtx {
    client: usize,
    next: Arc<AtomicU64>,
    inflight: Arc<AtomicI64>,
    start: Instant,
    plan: Plan,
    recorders: Arc<[Arc<Recorder>]>,
    stop: Stop,
    timeout: Duration,
}

async fn client_loop<W: Worker>(ctx: ClientCtx, mut worker: W) {
    // A stop aborts this task (see `run_load`), so the loop itself never waits on the signal:
    // one select and one wake-up less per request.
    loop {
        if ctx.stop.is_stopped() {
            return;
        }
        let i = ctx.next.fetch_add(1, Ordering::Relaxed);
        if i >= ctx.plan.total {
            return;
        }
        let due = match ctx.plan.rate {
            Some(rate) => ctx.start + Duration::from_secs_f64(i as f64 / rate),
            None => Instant::now(),
        };
        if ctx.plan.until.is_some_and(|end| due > end) {
            return;
        }
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        let sent = due;
        ctx.inflight.fetch_add(1, Ordering::Relaxed);
        let (report, call) = worker.call(i);
        // Boxed once: the request future is large, and moving it through the timeout
        // combinator unboxed costs more than the allocation.
        let result = tokio::time::timeout(ctx.timeout, Box::pin(call)).await;
        ctx.inflight.fetch_sub(1, Ordering::Relaxed);
        let end = Instant::now();
        let recorder = &ctx.recorders[report.min(ctx.recorders.len() - 1)];
        match result {
            Ok(Ok(())) => recorder.ok(ctx.client, sent, end),
            Ok(Err(e)) => {
                recorder.err(ctx.client, &e.text);
                if e.fatal {
                    ctx.stop.stop(format!("the server does not serve this request ({})", e.text));
                }
            }
            Err(_) => recorder
                .err(ctx.client, &format!("request timed out after {:?} (--request-timeout)", ctx.timeout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo {
        fail_every: u64,
        delay: Duration,
    }

    impl Worker for Echo {
        fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
            let delay = self.delay;
            let fail = self.fail_every > 0 && i % self.fail_every == 0;
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

    fn settings() -> Settings {
        #[derive(clap::Parser)]
        struct Line {
            #[command(flatten)]
            global: crate::settings::Global,
        }
        let args = ["t", "--endpoints=127.0.0.1:1", "--clients=4", "--json", "--request-timeout=200ms"];
        <Line as clap::Parser>::parse_from(args).global.settings().expect("valid")
    }

    #[tokio::test]
    async fn runs_the_total_over_clients_and_counts_errors() {
        let rec = Arc::new(Recorder::new("t", 4, false));
        let workers: Vec<Echo> = (0..4).map(|_| Echo { fail_every: 10, delay: Duration::ZERO }).collect();
        let stop = Stop::new();
        run_load(&settings(), &stop, Plan::new(100, 0), std::slice::from_ref(&rec), workers).await;
        let s = rec.stats(Duration::from_secs(1));
        assert_eq!(s.requests, 90);
        assert_eq!(s.errors, 10);
        assert!(stop.reason().is_none());
    }

    #[tokio::test]
    async fn rate_spaces_requests_and_timeouts_count() {
        let rec = Arc::new(Recorder::new("t", 1, false));
        let stop = Stop::new();
        let elapsed = run_load(
            &settings(),
            &stop,
            Plan::new(5, 50),
            std::slice::from_ref(&rec),
            vec![Echo { fail_every: 0, delay: Duration::ZERO }],
        )
        .await;
        // 5 requests at 50/s: the last is due at 80 ms.
        assert!(elapsed >= Duration::from_millis(80), "{elapsed:?}");
        assert_eq!(rec.succeeded(), 5);

        let rec = Arc::new(Recorder::new("t", 1, false));
        run_load(
            &settings(),
            &stop,
            Plan::new(2, 0),
            std::slice::from_ref(&rec),
            vec![Echo { fail_every: 0, delay: Duration::from_secs(5) }],
        )
        .await;
        let s = rec.stats(Duration::from_secs(1));
        assert_eq!(s.errors, 2);
        assert!(s.error_distribution[0].error.contains("timed out"));
    }

    #[tokio::test]
    async fn coordinated_omission_measures_from_the_intended_time() {
        // One client, 10 requests at 100/s, each taking 50 ms: request i is due at 10·i ms but
        // can only start at 50·i ms, so its latency grows to ~50 + 40·i ms.
        let rec = Arc::new(Recorder::new("t", 1, false));
        run_load(
            &settings(),
            &Stop::new(),
            Plan::new(10, 100),
            std::slice::from_ref(&rec),
            vec![Echo { fail_every: 0, delay: Duration::from_millis(50) }],
        )
        .await;
        let s = rec.stats(Duration::from_secs(1));
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
        let rec = Arc::new(Recorder::new("t", 1, false));
        let stop = Stop::new();
        run_load(&settings(), &stop, Plan::new(1000, 0), std::slice::from_ref(&rec), vec![Unimpl]).await;
        assert!(rec.completed() < 1000);
        assert!(stop.reason().unwrap_or_default().contains("Unimplemented"));
    }
}
