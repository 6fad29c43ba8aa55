//! A server the bench client starts itself: actcd or etcd on loopback ports, on a fresh data
//! dir under a temp dir, with equal durability (both fsync before acknowledging) and a backend
//! quota large enough for etcd's storage-memory rows. Stopped by its own pid (the child), never
//! by name; the data dir goes with it.

use crate::conn::dial;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

    /// Where the binary is when `--server-bin` is not given: actcd next to this executable (one
    /// `cargo build` puts both in the same target dir), etcd on PATH or Debian's /usr/bin/etcd.
    pub fn default_binary(self) -> Result<PathBuf, String> {
        match self {
            Kind::Actcd => {
                let me = std::env::current_exe().map_err(|e| format!("cannot locate actcd-bench: {e}"))?;
                let actcd = me.with_file_name("actcd");
                if actcd.is_file() {
                    Ok(actcd)
                } else {
                    Err(format!(
                        "actcd is not next to actcd-bench ({}): build it (cargo build --release -p actcd) or give --server-bin",
                        actcd.display()
                    ))
                }
            }
            Kind::Etcd => on_path("etcd")
                .or_else(|| Some(PathBuf::from("/usr/bin/etcd")).filter(|p| p.is_file()))
                .ok_or_else(|| {
                    "etcd not found on PATH (Debian: apt-get install etcd-server) or give --server-bin"
                        .to_string()
                }),
        }
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// How to start servers of one kind.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Which server.
    pub kind: Kind,
    /// Its binary.
    pub binary: PathBuf,
    /// Where data dirs and logs go (a temp dir the caller owns).
    pub work: PathBuf,
    /// `--quota-backend-bytes` for both servers.
    pub quota_bytes: u64,
}

impl Spec {
    /// The binary's version line (`etcd Version: 3.4.23`, `actcd 0.1.0`), empty when it has none.
    pub fn version(&self) -> String {
        Command::new(&self.binary)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
            .unwrap_or_default()
    }

    /// Starts a server named `name` (its data dir and log under `work`; a data dir of that name
    /// is removed first) and waits until it answers gRPC, at most `ready_within`.
    pub async fn start(&self, name: &str, ready_within: Duration) -> Result<Running, String> {
        let data = self.work.join(format!("{name}.data"));
        let log_path = self.work.join(format!("{name}.log"));
        let _ = std::fs::remove_dir_all(&data);
        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        let quota = self.quota_bytes.to_string();
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name").arg("bench").arg("--data-dir").arg(&data);
        cmd.args(["--listen-client-urls", &url, "--advertise-client-urls", &url]);
        cmd.args(["--quota-backend-bytes", &quota, "--log-level", "warn"]);
        if self.kind == Kind::Etcd {
            let peer = format!("http://127.0.0.1:{}", free_port()?);
            cmd.args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer]);
            cmd.arg("--initial-cluster").arg(format!("bench={peer}"));
        } else {
            // actcd's default metrics URL, 127.0.0.1:2381, would clash with another actcd and
            // with the Prometheus test (grafana/prometheus.yml scrapes that address).
            let metrics = format!("http://127.0.0.1:{}", free_port()?);
            cmd.args(["--listen-metrics-urls", &metrics]);
        }
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        let err_log = log.try_clone().map_err(|e| format!("cannot share the log file: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        let mut running =
            Running { pid: child.id(), endpoint: url, child, data, log: log_path, kind: self.kind };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(format!(
                    "{} exited at start ({status}); the end of its log: {}",
                    self.kind.name(),
                    running.log_tail()
                ));
            }
            let endpoints = [running.endpoint.clone()];
            if dial(&endpoints, 1, Duration::from_secs(1)).await.is_ok() {
                return Ok(running);
            }
            if started.elapsed() > ready_within {
                return Err(format!(
                    "{} did not answer on {} within {ready_within:?}; the end of its log: {}",
                    self.kind.name(),
                    running.endpoint,
                    running.log_tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1 (the kernel's pick for port 0).
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("no free loopback port: {e}"))
}

/// A started server; dropping it kills the process and removes its data dir.
#[derive(Debug)]
pub struct Running {
    /// Its pid (for /proc/PID/status).
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    child: Child,
    data: PathBuf,
    log: PathBuf,
    kind: Kind,
}

impl Running {
    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last lines of its log, on one line.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }

    /// Which server this is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Kills it (SIGKILL: nothing of its state is kept) and removes its data dir and log.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}
