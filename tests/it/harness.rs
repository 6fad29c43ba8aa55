//! Starting and stopping real servers for the tests: actcd from this build, etcd from Debian's
//! etcd-server package, each on free loopback ports with its own temporary data dir.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::RangeRequest;

/// A server process that is killed when dropped.
pub struct Server {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// `127.0.0.1:PORT`, as etcdctl wants it.
    pub address: String,
    /// `http://127.0.0.1:PORT` of /metrics, /health and /version (actcd only).
    pub metrics: String,
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (its inode in
/// /proc/net/tcp among the process's open files).
fn listens_on(pid: u32, port: u16) -> bool {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    let Some(inode) = tcp.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
            .then(|| fields.get(9).copied())?
    }) else {
        return false;
    };
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy() == socket))
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

impl Server {
    /// Starts actcd on `data_dir` with extra flags and waits until it answers. Free ports are
    /// found by binding port 0 and letting go, so another test may take one first: a start
    /// that fails is retried on fresh ports.
    pub async fn actcd(data_dir: &Path, extra: &[&str]) -> Server {
        for _ in 0..4 {
            if let Some(server) = Self::try_actcd(data_dir, extra).await {
                return server;
            }
        }
        panic!("actcd did not start on {} after 4 tries", data_dir.display());
    }

    /// Starts actcd like [`Server::actcd`], run by a wrapper command that execs it (`prlimit
    /// --nofile=N`, `fiu-run -x`), so that the child's pid is actcd's own.
    pub async fn actcd_under(wrapper: &[&str], data_dir: &Path, extra: &[&str]) -> Server {
        for _ in 0..4 {
            if let Some(server) = Self::try_actcd_under(wrapper, data_dir, extra).await {
                return server;
            }
        }
        panic!("actcd under {wrapper:?} did not start on {} after 4 tries", data_dir.display());
    }

    /// Starts actcd with /metrics on `metrics_url`, a fixed address (one that a Prometheus
    /// configuration names, say) which the caller has checked is free. The client port is free
    /// and retried as in [`Server::actcd`].
    pub async fn actcd_with_metrics_url(data_dir: &Path, metrics_url: &str, extra: &[&str]) -> Server {
        for _ in 0..4 {
            if let Some(server) = Self::try_actcd_on(&[], data_dir, metrics_url.to_string(), extra).await {
                return server;
            }
        }
        panic!("actcd did not start with metrics on {metrics_url} after 4 tries");
    }

    async fn try_actcd(data_dir: &Path, extra: &[&str]) -> Option<Server> {
        Self::try_actcd_under(&[], data_dir, extra).await
    }

    async fn try_actcd_under(wrapper: &[&str], data_dir: &Path, extra: &[&str]) -> Option<Server> {
        let metrics = format!("http://127.0.0.1:{}", free_port());
        Self::try_actcd_on(wrapper, data_dir, metrics, extra).await
    }

    async fn try_actcd_on(
        wrapper: &[&str],
        data_dir: &Path,
        metrics: String,
        extra: &[&str],
    ) -> Option<Server> {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(env!("CARGO_BIN_EXE_actcd"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_actcd")),
        };
        let child = command
            .arg("--listen-metrics-urls")
            .arg(&metrics)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen-client-urls")
            .arg(&url)
            .arg("--advertise-client-urls")
            .arg(&url)
            .arg("--log-level")
            .arg("warn")
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("actcd starts");
        let mut server = Self::wait_ready(child, port).await?;
        server.metrics = metrics;
        Some(server)
    }

    /// Starts Debian's etcd 3.4 on a temp dir and waits until it answers.
    pub async fn etcd(data_dir: &Path) -> Server {
        Self::etcd_with(data_dir, &[]).await
    }

    /// [`Server::etcd`] with extra flags (`--metrics extensive`, say). etcd serves /metrics on
    /// its client URL (`endpoint`).
    pub async fn etcd_with(data_dir: &Path, extra: &[&str]) -> Server {
        let port = free_port();
        let peer = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new(etcd_binary())
            .arg("--name")
            .arg("differential")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen-client-urls")
            .arg(&url)
            .arg("--advertise-client-urls")
            .arg(&url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("differential={peer_url}"))
            .arg("--log-level")
            .arg("error")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts (apt-get install etcd-server)");
        Self::wait_ready(child, port).await.expect("etcd starts")
    }

    /// Waits until the server answers; `None` if it exited first.
    async fn wait_ready(mut child: Child, port: u16) -> Option<Server> {
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("server on port {port} exited before it was ready: {status}");
                return None;
            }
            if let Ok(mut kv) = KvClient::connect(endpoint.clone()).await {
                let probe = RangeRequest { key: "ready".into(), ..Default::default() };
                // Answered, but by our child? Another test's server may have taken the port
                // between free_port() and our child's bind.
                if kv.range(probe).await.is_ok() && listens_on(child.id(), port) {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "server on port {port} not ready within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(Server {
            child: Some(child),
            endpoint,
            address: format!("127.0.0.1:{port}"),
            metrics: String::new(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
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

    /// CPU time (user + system) the process has used so far.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let ticks: u64 =
            fields.get(11..13).map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
        // The kernel reports clock ticks of 1/100 s (USER_HZ on Linux).
        Duration::from_millis(ticks * 10)
    }

    /// Open file descriptors of the process.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A raw gRPC KV client (the project's own generated stubs).
    pub async fn kv(&self) -> KvClient<tonic::transport::Channel> {
        KvClient::connect(self.endpoint.clone()).await.expect("connect")
    }

    /// A client from the independent `etcd-client` crate.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint.as_str()], None).await.expect("etcd-client connects")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Debian's etcd binary.
pub fn etcd_binary() -> PathBuf {
    PathBuf::from(std::env::var("ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into()))
}

/// Debian's etcdctl binary.
pub fn etcdctl_binary() -> PathBuf {
    PathBuf::from(std::env::var("ETCDCTL_BIN").unwrap_or_else(|_| "/usr/bin/etcdctl".into()))
}

/// Runs Debian's etcdctl (v3 API) against `server`, feeding `stdin` if given:
/// (succeeded, stdout, stderr).
pub fn etcdctl(server: &Server, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(&server.address)
        .arg("--command-timeout=20s")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl runs (apt-get install etcd-client)");
    if let Some(input) = stdin {
        if let Some(mut pipe) = child.stdin.take() {
            pipe.write_all(input.as_bytes()).expect("etcdctl reads its input");
        }
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("etcdctl finishes");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Clears what may differ between two servers with the same history (member identity and raft
/// term), so their responses compare field by field.
pub fn strip_identity(header: &mut Option<actcd_proto::etcdserverpb::ResponseHeader>) {
    if let Some(h) = header {
        h.cluster_id = 0;
        h.member_id = 0;
        h.raft_term = 0;
    }
}

/// One unlabelled sample from actcd's /metrics (a plain HTTP/1.0 GET), if exported.
pub async fn metric(server: &Server, name: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = server.metrics.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    stream.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The values of several series (0 for one not exported).
pub async fn metrics(server: &Server, names: &[&str]) -> Vec<f64> {
    let mut values = Vec::with_capacity(names.len());
    for name in names {
        values.push(metric(server, name).await.unwrap_or(0.0));
    }
    values
}

/// Waits up to 10 s for the series to read `expected` (gauges published on a timer lag a
/// little), and fails saying `what` otherwise.
pub async fn wait_for_metrics(server: &Server, names: &[&str], expected: &[f64], what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = metrics(server, names).await;
        if now == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {now:?}, expected {expected:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
