//! Starting actcd or etcd as a child process on free loopback ports, for tests and the
//! benchmark tables alike, and stopping it by its own pid (the child), never by name.
//!
//! A start picks free ports (binding port 0 and letting go), spawns the server and waits until
//! it answers a Range and the socket on its port is its own: another process may take a port
//! between the pick and the bind, so a start whose server exits early is tried again on fresh
//! ports, up to four times. etcd gets a peer URL and a one-member initial cluster; actcd gets
//! its metrics URL on a free port unless one is given (its default, 127.0.0.1:2381, would clash
//! with another actcd and with the Prometheus test, which scrapes that address).

use crate::procfs::{self, Memory, Proc};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::RangeRequest;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts tried before giving up (each on fresh ports).
const TRIES: usize = 4;

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// actcd.
    Actcd,
    /// etcd (Debian's etcd 3.4 or any etcd v3).
    Etcd,
}

impl Kind {
    /// `actcd` or `etcd`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "actcd" => Ok(Kind::Actcd),
            "etcd" => Ok(Kind::Etcd),
            other => Err(format!("--server must be actcd or etcd, got {other:?}")),
        }
    }

    /// The name results carry.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Actcd => "actcd",
            Kind::Etcd => "etcd",
        }
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The binary could not be run, or its log file not created.
    #[error("cannot start {binary}: {error}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// No loopback port could be bound.
    #[error("no free loopback port: {0}")]
    NoPort(std::io::Error),
    /// It exited before it answered, every try.
    #[error("{kind} exited at start ({status}); the end of its log: {log}")]
    Exited {
        /// Which server.
        kind: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The last lines of its log (empty without one).
        log: String,
    },
    /// It runs but did not answer in time.
    #[error("{kind} did not answer on {endpoint} within {within:?}; the end of its log: {log}")]
    NotReady {
        /// Which server.
        kind: &'static str,
        /// Where it was to answer.
        endpoint: String,
        /// How long it was given.
        within: Duration,
        /// The last lines of its log (empty without one).
        log: String,
    },
}

/// How to start a server: its kind, binary and data dir, and what to add to its command line.
#[derive(Debug, Clone)]
pub struct Launch {
    kind: Kind,
    binary: PathBuf,
    data_dir: PathBuf,
    wrapper: Vec<String>,
    host: std::net::Ipv4Addr,
    port: Option<u16>,
    args: Vec<String>,
    name: Option<String>,
    metrics_url: Option<String>,
    log: Option<PathBuf>,
    log_level: &'static str,
    fresh: bool,
}

impl Launch {
    /// `kind` from `binary` on `data_dir`. Its output goes nowhere (actcd's stderr to ours)
    /// unless [`Launch::log_to`] names a file.
    pub fn new(kind: Kind, binary: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            kind,
            binary: binary.into(),
            data_dir: data_dir.into(),
            wrapper: Vec::new(),
            host: std::net::Ipv4Addr::LOCALHOST,
            port: None,
            args: Vec::new(),
            name: None,
            metrics_url: None,
            log: None,
            log_level: match kind {
                Kind::Actcd => "warn",
                Kind::Etcd => "error",
            },
            fresh: false,
        }
    }

    /// Runs the server under a wrapper that execs it (`prlimit --nofile=N`, `fiu-run -x`), so
    /// that the child's pid is the server's own.
    pub fn wrapper(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The address its client URL (and actcd's metrics URL) listens on, instead of 127.0.0.1:
    /// one of a network namespace the wrapper (`ip netns exec NS`) runs it in, which the
    /// caller reaches by a route of its own. Ports are still picked free on our loopback:
    /// a namespace of its own has them all free anyway.
    pub fn host(mut self, host: std::net::Ipv4Addr) -> Self {
        self.host = host;
        self
    }

    /// A fixed client port instead of a free one picked at each start: for a server alone in
    /// its network namespace, whose clients then find it at the same URL after a restart.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// More flags for the server.
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args.extend(args.iter().map(|s| s.as_ref().to_string()));
        self
    }

    /// `--name` (etcd's member name, also in its initial cluster; default `default`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// actcd's metrics URL, a fixed address the caller has checked is free.
    pub fn metrics_url(mut self, url: &str) -> Self {
        self.metrics_url = Some(url.to_string());
        self
    }

    /// The server's stdout and stderr go to `path`, whose last lines a failed start reports.
    pub fn log_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// `--log-level` (default: warn for actcd, error for etcd).
    pub fn log_level(mut self, level: &'static str) -> Self {
        self.log_level = level;
        self
    }

    /// Removes the data dir before the start and, with the log, when the server is dropped.
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// Starts the server and waits until it answers, at most `ready_within` a try.
    pub async fn start(&self, ready_within: Duration) -> Result<Server, StartError> {
        let mut last = None;
        for _ in 0..TRIES {
            match self.try_start(ready_within).await {
                Err(e @ StartError::Exited { .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.unwrap_or(StartError::NoPort(std::io::Error::other("no try made"))))
    }

    async fn try_start(&self, ready_within: Duration) -> Result<Server, StartError> {
        if self.fresh {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
        let port = match self.port {
            Some(port) => port,
            None => free_port()?,
        };
        let host = self.host;
        let url = format!("http://{host}:{port}");
        let mut cmd = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        if let Some(name) = &self.name {
            cmd.args(["--name", name]);
        }
        cmd.arg("--data-dir").arg(&self.data_dir);
        cmd.args(["--listen-client-urls", &url, "--advertise-client-urls", &url]);
        let mut metrics = String::new();
        match self.kind {
            Kind::Etcd => {
                let peer = format!("http://127.0.0.1:{}", free_port()?);
                let name = self.name.as_deref().unwrap_or("default");
                cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
                cmd.arg("--initial-cluster").arg(format!("{name}={peer}"));
            }
            Kind::Actcd => {
                metrics = match &self.metrics_url {
                    Some(url) => url.clone(),
                    None => format!("http://{host}:{}", free_port()?),
                };
                cmd.args(["--listen-metrics-urls", &metrics]);
            }
        }
        cmd.args(["--log-level", self.log_level]).args(&self.args).stdin(Stdio::null());
        let spawn_error = |error| StartError::Spawn { binary: self.binary.clone(), error };
        match &self.log {
            Some(path) => {
                let log = std::fs::File::create(path).map_err(spawn_error)?;
                cmd.stdout(log.try_clone().map_err(spawn_error)?).stderr(log);
            }
            None if self.kind == Kind::Actcd => {
                cmd.stdout(Stdio::null());
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        let child = cmd.spawn().map_err(spawn_error)?;
        let mut server = Server {
            pid: child.id(),
            child: Some(child),
            endpoint: url,
            address: format!("{host}:{port}"),
            metrics,
            log: self.log.clone(),
            remove: self.fresh.then(|| self.data_dir.clone()),
        };
        let deadline = Instant::now() + ready_within;
        loop {
            if let Some(status) = server.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                server.child = None;
                return Err(StartError::Exited { kind: self.kind.name(), status, log: server.log_tail() });
            }
            if answers(&server.endpoint).await && procfs::listens_at(server.pid, host, port) {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(StartError::NotReady {
                    kind: self.kind.name(),
                    endpoint: server.endpoint.clone(),
                    within: ready_within,
                    log: server.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether a gRPC server at `endpoint` answers a Range: a response, or one of etcd's refusals
/// (a server with auth enabled answers a probe without a token "user name is empty"; a
/// learner refuses a linearizable read, and serves).
async fn answers(endpoint: &str) -> bool {
    let Ok(mut kv) = KvClient::connect(endpoint.to_string()).await else {
        return false;
    };
    let probe = RangeRequest { key: "ready".into(), ..Default::default() };
    match tokio::time::timeout(Duration::from_secs(1), kv.range(probe)).await {
        Ok(Ok(_)) => true,
        Ok(Err(status)) => {
            status.message().starts_with("etcdserver: user name is empty")
                || status.message() == "etcdserver: rpc not supported for learner"
        }
        Err(_) => false,
    }
}

/// Where [`free_port`] hands out ports: below Linux's ephemeral range (32768-60999), so no
/// outgoing connection of a test running beside it takes a port between the check and the
/// server's bind. The kernel's pick for port 0 lies inside that range: a cluster test lost a
/// peer port that way to another test's client connection.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// A loopback port nobody listens on right now and that this process has not handed out before
/// (a counter through [`PORTS`], started at an offset drawn from the process id so that two test
/// processes side by side start apart).
pub fn free_port() -> Result<u16, StartError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut last = None;
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = PORTS.start + u16::try_from(offset).unwrap_or(0);
        match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(StartError::NoPort(last.unwrap_or_else(|| std::io::Error::other("no port tried"))))
}

/// A started server; dropping it kills the process (and, if [`Launch::fresh`], removes its
/// data dir and log).
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    pid: u32,
    /// `http://127.0.0.1:PORT` (or the [`Launch::host`] given).
    pub endpoint: String,
    /// `127.0.0.1:PORT`, as etcdctl wants it.
    pub address: String,
    /// `http://127.0.0.1:PORT` of /metrics, /health and /version (actcd only; empty for etcd,
    /// which serves them on `endpoint`).
    pub metrics: String,
    log: Option<PathBuf>,
    remove: Option<PathBuf>,
}

impl Server {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The last lines of its log, on one line (empty without a log file).
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Some(mut f) = self.log.as_deref().and_then(|p| std::fs::File::open(p).ok()) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }

    /// Resident memory of the process.
    pub fn memory(&self) -> Result<Memory, String> {
        procfs::memory(Proc::Pid(self.pid))
    }

    /// CPU time (user + system) the process has used so far (zero once it is gone).
    pub fn cpu_time(&self) -> Duration {
        procfs::cpu_times(Proc::Pid(self.pid)).map_or(Duration::ZERO, |t| t.total())
    }

    /// Open file descriptors of the process.
    pub fn open_fds(&self) -> usize {
        procfs::open_fds(Proc::Pid(self.pid))
    }

    /// A raw gRPC KV client (the project's own generated stubs).
    pub async fn kv(&self) -> KvClient<tonic::transport::Channel> {
        KvClient::connect(self.endpoint.clone()).await.expect("connect")
    }

    /// A raw gRPC Watch client.
    pub async fn watch_client(
        &self,
    ) -> actcd_proto::etcdserverpb::watch_client::WatchClient<tonic::transport::Channel> {
        actcd_proto::etcdserverpb::watch_client::WatchClient::connect(self.endpoint.clone())
            .await
            .expect("connect")
    }

    /// Waits up to `timeout` for the process to exit on its own and returns its status; `None`
    /// if it is still running (or was already reaped).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL (nothing of its state is kept), then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.remove {
            let _ = std::fs::remove_dir_all(dir);
            if let Some(log) = &self.log {
                let _ = std::fs::remove_file(log);
            }
        }
    }
}
