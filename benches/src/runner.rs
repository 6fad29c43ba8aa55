//! The load loop shared by the request/response commands, and what every command needs around
//! it: the stop signal (Ctrl-C, a fatal error, the stall watchdog), the progress bar and the
//! output (etcd's text, or one JSON document).
//!
//! Each client is a tokio task that owns a [`Worker`] (its gRPC client on its connection and its
//! request state). Clients claim request numbers from one counter until `--total` is reached, so
//! the work spreads over them like etcd's shared request channel. With `--rate`, request `i` is
//! due at `start + i / rate`; its latency is measured from that intended time, not from when a
//! busy client got round to sending it, so a stalled server shows in the latencies (coordinated
//! omission). Every request runs under `--request-timeout`.

use crate::cpu::{ClientCpu, CpuTimes};
use crate::report::{Recorder, Stats};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
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

/// The stop signal: set once, with the first reason, by Ctrl-C, a fatal error or the watchdog.
#[derive(Clone)]
pub struct Stop {
    tx: Arc<watch::Sender<bool>>,
    reason: Arc<Mutex<Option<String>>>,
}

impl Default for Stop {
    fn default() -> Self {
        Self::new()
    }
}

impl Stop {
    /// A signal not yet set.
    pub fn new() -> Self {
        Self { tx: Arc::new(watch::channel(false).0), reason: Arc::new(Mutex::new(None)) }
    }

    /// Sets the signal; the first reason given is kept.
    pub fn stop(&self, reason: impl Into<String>) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                *r = Some(reason.into());
            }
        }
        self.tx.send_replace(true);
    }

    /// Whether the signal is set.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    /// Why the run stopped early, if it did.
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A receiver for [`Stop::stopped`].
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    /// Resolves once the signal is set.
    pub async fn stopped(rx: &mut watch::Receiver<bool>) {
        if rx.wait_for(|s| *s).await.is_err() {
            // The sender lives as long as any `Stop`; if it is gone nobody can stop us.
            std::future::pending::<()>().await;
        }
    }
}

/// The global settings every command runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Endpoint URIs.
    pub endpoints: Vec<String>,
    /// Connections (gRPC channels).
    pub conns: usize,
    /// Clients, spread round-robin over the connections.
    pub clients: usize,
    /// Keep the per-second time series.
    pub sample: bool,
    /// `%g` instead of `%4.4f`.
    pub precise: bool,
    /// Print one JSON document instead of text.
    pub json: bool,
    /// Bound on connecting.
    pub dial_timeout: Duration,
    /// Bound on each request.
    pub request_timeout: Duration,
    /// Stop when nothing succeeded for this long while requests were outstanding or failing.
    pub stall_timeout: Duration,
    /// Client threads (1: a current-thread runtime).
    pub threads: usize,
}

/// The output of one command: etcd's text on stdout as it goes, or one JSON document at the end.
pub struct Out {
    settings: Settings,
    doc: Mutex<Document>,
    cpu_start: Option<CpuTimes>,
    started: Instant,
}

/// The JSON document `--json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Document {
    /// The command (`put`, `range`, ...).
    pub command: String,
    /// The endpoints.
    pub endpoints: Vec<String>,
    /// Connections.
    pub conns: usize,
    /// Clients.
    pub clients: usize,
    /// The reports, in the order the text prints them.
    pub reports: Vec<Stats>,
    /// The client's own CPU use over the command.
    pub client_cpu: Option<ClientCpu>,
    /// Why the run stopped early (Ctrl-C, a fatal error, a stall, unreachable endpoint).
    pub aborted: Option<String>,
    /// Warnings and notes also printed on stderr.
    pub notes: Vec<String>,
    /// Command-specific figures (HashKV, read/write op counts).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Out {
    /// Output for `command` run with `settings`; the CPU clock starts now.
    pub fn new(command: &str, settings: &Settings) -> Self {
        Self {
            doc: Mutex::new(Document {
                command: command.to_string(),
                endpoints: settings.endpoints.clone(),
                conns: settings.conns,
                clients: settings.clients,
                ..Document::default()
            }),
            settings: settings.clone(),
            cpu_start: CpuTimes::now(),
            started: Instant::now(),
        }
    }

    fn doc(&self) -> std::sync::MutexGuard<'_, Document> {
        self.doc.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the JSON document holds so far.
    pub fn document(&self) -> Document {
        self.doc().clone()
    }

    /// Whether `--json` is on.
    pub fn json(&self) -> bool {
        self.settings.json
    }

    /// Prints `text` as is (text mode only).
    pub fn print(&self, text: &str) {
        if !self.settings.json {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
    }

    /// Prints a report (text mode: `before`, etcd's report text, `after`) or adds it to the JSON.
    pub fn report(&self, before: &str, stats: Stats, after: &str) {
        if self.settings.json {
            self.doc().reports.push(stats);
        } else {
            self.print(&format!("{before}{}{after}", stats.to_text(self.settings.precise)));
        }
    }

    /// A warning or note: on stderr, and in the JSON's notes.
    pub fn note(&self, text: impl Into<String>) {
        let text = text.into();
        eprintln!("{text}");
        self.doc().notes.push(text);
    }

    /// A command-specific figure for the JSON.
    pub fn extra(&self, key: &str, value: serde_json::Value) {
        self.doc().extra.insert(key.to_string(), value);
    }

    /// Finishes: the client's CPU use (text) or the JSON document, and the early stop if any.
    /// Returns the process exit code: 0, or 1 when the run was stopped early.
    pub fn finish(self, aborted: Option<String>) -> i32 {
        let cpu = ClientCpu::measure(self.cpu_start, self.started.elapsed());
        let code = if aborted.is_some() { 1 } else { 0 };
        if self.settings.json {
            let mut doc = self.doc().clone();
            doc.client_cpu = cpu;
            doc.aborted = aborted.clone();
            match serde_json::to_string_pretty(&doc) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("error: cannot encode the JSON report: {e}"),
            }
        } else if let Some(cpu) = cpu {
            self.print(&cpu.to_text());
        }
        if let Some(reason) = aborted {
            eprintln!("actcd-bench: stopped early: {reason}");
        }
        code
    }
}

/// A progress bar on stdout, only when stdout is a terminal (and not with `--json`); it reads
/// its position from `probe` ten times a second, so clients never touch it.
pub struct Progress {
    bar: Option<ProgressBar>,
    ticker: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts a bar of `total` steps.
    pub fn start(settings: &Settings, total: u64, probe: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        if settings.json || !std::io::stdout().is_terminal() || total == 0 {
            return Self { bar: None, ticker: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stdout());
        if let Ok(style) = ProgressStyle::with_template(
            "{pos:>7}/{len:7} [{bar:40}] {percent:>3}% {per_sec:>12} {elapsed_precise}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        let b = bar.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                b.set_position(probe());
            }
        });
        Self { bar: Some(bar), ticker: Some(ticker) }
    }

    /// Stops the bar at `position`.
    pub fn finish(self, position: u64) {
        if let Some(t) = self.ticker {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.set_position(position);
            b.finish();
        }
    }
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
}

impl Plan {
    /// `total` requests at `rate` per second (0 = no limit).
    pub fn new(total: u64, rate: u64) -> Self {
        Self { total, rate: (rate > 0).then_some(rate as f64), progress: true }
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
        let sent = match ctx.plan.rate {
            Some(rate) => {
                let due = ctx.start + Duration::from_secs_f64(i as f64 / rate);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
                due
            }
            None => Instant::now(),
        };
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
        Settings {
            endpoints: vec!["http://127.0.0.1:1".to_string()],
            conns: 1,
            clients: 4,
            sample: false,
            precise: false,
            json: true,
            dial_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_millis(200),
            stall_timeout: Duration::from_secs(5),
            threads: 1,
        }
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
