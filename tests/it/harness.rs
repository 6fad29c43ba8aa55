//! Starting and stopping real servers for the tests: actcd from this build, etcd from Debian's
//! etcd-server package, each on free loopback ports with its own temporary data dir, through
//! the launcher every test and benchmark shares (`actcd_test_support::server`).

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use actcd_test_support::server::{Kind, Launch};

/// How long a server may take to answer after its start (the machine is shared and busy).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A server process that is killed when dropped, then its data dir removed if the server
/// made it (fields drop in order: the process goes before its files).
pub struct Server {
    process: actcd_test_support::server::Server,
    _data_dir: Option<tempfile::TempDir>,
}

impl Deref for Server {
    type Target = actcd_test_support::server::Server;

    fn deref(&self) -> &Self::Target {
        &self.process
    }
}

impl DerefMut for Server {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.process
    }
}

impl From<actcd_test_support::server::Server> for Server {
    fn from(server: actcd_test_support::server::Server) -> Self {
        Server { process: server, _data_dir: None }
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    actcd_test_support::server::free_port().expect("a free port")
}

impl Server {
    async fn start(launch: Launch) -> Server {
        match launch.start(READY_WITHIN).await {
            Ok(server) => Server { process: server, _data_dir: None },
            Err(e) => panic!("{e}"),
        }
    }

    /// actcd's launch on `data_dir` with extra flags, for a test that expects the start to fail.
    pub fn launch_actcd(data_dir: &Path, extra: &[&str]) -> Launch {
        Self::actcd_launch(data_dir, extra)
    }

    fn actcd_launch(data_dir: &Path, extra: &[&str]) -> Launch {
        Launch::new(Kind::Actcd, env!("CARGO_BIN_EXE_actcd"), data_dir).args(extra)
    }

    /// Starts actcd on `data_dir` with extra flags and waits until it answers (a start that
    /// loses its ports to another test is retried on fresh ones).
    pub async fn actcd(data_dir: &Path, extra: &[&str]) -> Server {
        Self::start(Self::actcd_launch(data_dir, extra)).await
    }

    /// Starts actcd on a temporary data dir of its own, removed after the process.
    pub async fn temp_actcd(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("a temporary data dir");
        Server { process: Self::actcd(dir.path(), extra).await.process, _data_dir: Some(dir) }
    }

    /// Starts Debian's etcd 3.4 like [`Server::temp_actcd`].
    pub async fn temp_etcd(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("a temporary data dir");
        Server { process: Self::etcd_with(dir.path(), extra).await.process, _data_dir: Some(dir) }
    }

    /// Starts actcd like [`Server::actcd`] with its log lines written to `log`, for a test
    /// that waits on what the server says.
    pub async fn actcd_logged(data_dir: &Path, log: &Path, extra: &[&str]) -> Server {
        Self::start(Self::actcd_launch(data_dir, extra).log_to(log)).await
    }

    /// Starts actcd like [`Server::actcd`], run by a wrapper command that execs it (`prlimit
    /// --nofile=N`, `fiu-run -x`), so that the child's pid is actcd's own.
    pub async fn actcd_under(wrapper: &[&str], data_dir: &Path, extra: &[&str]) -> Server {
        Self::start(Self::actcd_launch(data_dir, extra).wrapper(wrapper)).await
    }

    /// Starts actcd with /metrics on `metrics_url`, a fixed address (one that a Prometheus
    /// configuration names, say) which the caller has checked is free.
    pub async fn actcd_with_metrics_url(data_dir: &Path, metrics_url: &str, extra: &[&str]) -> Server {
        Self::start(Self::actcd_launch(data_dir, extra).metrics_url(metrics_url)).await
    }

    /// Starts Debian's etcd 3.4 on a temp dir and waits until it answers.
    pub async fn etcd(data_dir: &Path) -> Server {
        Self::etcd_with(data_dir, &[]).await
    }

    /// [`Server::etcd`] with extra flags (`--metrics extensive`, say). etcd serves /metrics on
    /// its client URL (`endpoint`).
    pub async fn etcd_with(data_dir: &Path, extra: &[&str]) -> Server {
        Self::start(Launch::new(Kind::Etcd, etcd_binary(), data_dir).name("differential").args(extra)).await
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.memory().map_or(0, |m| m.rss_kb * 1024)
    }

    /// A client from the independent `etcd-client` crate.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint.as_str()], None).await.expect("etcd-client connects")
    }
}

/// A differential run: `script` on a fresh etcd 3.4 with `etcd_flags`, stopped, then on a fresh
/// actcd with `actcd_flags`: (on etcd, on actcd). One server at a time, so neither slows the
/// other.
pub async fn on_etcd_then_actcd<T>(
    etcd_flags: &[&str],
    actcd_flags: &[&str],
    script: impl AsyncFn(&Server) -> T,
) -> (T, T) {
    let on_etcd = script(&Server::temp_etcd(etcd_flags).await).await;
    let on_actcd = script(&Server::temp_actcd(actcd_flags).await).await;
    (on_etcd, on_actcd)
}

/// Debian's etcd binary.
pub fn etcd_binary() -> PathBuf {
    PathBuf::from(std::env::var("ETCD_BIN").unwrap_or_else(|_| "/usr/bin/etcd".into()))
}

/// Debian's etcdctl binary.
pub fn etcdctl_binary() -> PathBuf {
    PathBuf::from(std::env::var("ETCDCTL_BIN").unwrap_or_else(|_| "/usr/bin/etcdctl".into()))
}

/// A member's peer flags: it listens on and advertises `peer`, in the cluster that `initial`
/// names (`name=URL,...`).
pub fn peer_flags<'a>(peer: &'a str, initial: &'a str) -> [&'a str; 6] {
    ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", initial]
}

/// Puts keys `key(0)` to `key(n - 1)`, valued `v0` to `v{n - 1}`, one write at a time: the
/// revision of the last.
pub async fn put_many(
    kv: &mut actcd_proto::etcdserverpb::kv_client::KvClient<tonic::transport::Channel>,
    n: usize,
    key: impl Fn(usize) -> String,
) -> i64 {
    let mut last = 0;
    for i in 0..n {
        let put = actcd_proto::etcdserverpb::PutRequest {
            key: key(i).into(),
            value: format!("v{i}").into(),
            ..Default::default()
        };
        last = kv.put(put).await.unwrap().into_inner().header.unwrap().revision;
    }
    last
}

/// etcdctl's `--user` for the root user [`enable_auth`] adds.
pub const ROOT: &str = "--user=root:rootpw";
/// etcdctl's `--user` for the user alice [`enable_auth`] adds.
pub const ALICE: &str = "--user=alice:apw";

/// Auth enabled through etcdctl as an operator does it: root, then alice with the role r1,
/// which holds `permission` (read, write or readwrite) on the keys under `prefix`.
pub fn enable_auth(server: &Server, permission: &str, prefix: &str) {
    for args in [
        vec!["user", "add", "root", "--new-user-password=rootpw"],
        vec!["auth", "enable"],
        vec![ROOT, "user", "add", "alice", "--new-user-password=apw"],
        vec![ROOT, "role", "add", "r1"],
        vec![ROOT, "role", "grant-permission", "--prefix", "r1", permission, prefix],
        vec![ROOT, "user", "grant-role", "alice", "r1"],
    ] {
        let (ok, out, err) = etcdctl(server, &args, None);
        assert!(ok, "{args:?}: {out} {err}");
    }
}

/// A simple token for `user`, from Authenticate.
pub async fn auth_token(server: &Server, user: &str, password: &str) -> String {
    use actcd_proto::etcdserverpb::{auth_client::AuthClient, AuthenticateRequest};
    let mut auth = AuthClient::connect(server.endpoint.clone()).await.unwrap();
    let req = AuthenticateRequest { name: user.into(), password: password.into() };
    auth.authenticate(req).await.unwrap().into_inner().token
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

/// actcd's /metrics page (a plain HTTP/1.0 GET), if it answers.
async fn metrics_page(server: &Server) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = server.metrics.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
    stream.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes()).await.ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    Some(text)
}

/// One unlabelled sample from actcd's /metrics, if exported.
pub async fn metric(server: &Server, name: &str) -> Option<f64> {
    let text = metrics_page(server).await?;
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum of series `name`'s samples whose labels include every `label="value"` of `labels`
/// (0 when none is exported).
pub async fn metric_sum(server: &Server, name: &str, labels: &[&str]) -> f64 {
    let text = metrics_page(server).await.unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum()
}

/// gRPC calls of `method` (`grpc_method="..."`) the server has started and not yet answered,
/// from go-grpc-prometheus's started and handled series.
pub async fn calls_in_progress(server: &Server, method: &str) -> f64 {
    let label = format!("grpc_method=\"{method}\"");
    metric_sum(server, "grpc_server_started_total", &[&label]).await
        - metric_sum(server, "grpc_server_handled_total", &[&label]).await
}

/// Polls `check` every 20 ms until it holds, failing with `what` after `within`: the wait on
/// something observable that a fixed sleep before an assertion would only guess at.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// An HTTP answer: status code, header lines (lower-cased names), body (de-chunked).
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with a JSON `body` on its own connection to `address` (`host:port`
/// or `http://host:port`), read to its end within 30 s.
pub async fn http(method: &str, address: &str, path: &str, body: &str) -> HttpAnswer {
    http_with(method, address, path, &[], body).await
}

/// [`http`] with more request headers (`Authorization`, `Origin`).
pub async fn http_with(
    method: &str,
    address: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpAnswer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let extra: String = headers.iter().map(|(name, value)| format!("{name}: {value}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // A server that refuses a body unread may close before all of it is written.
    let _ = stream.write_all(body.as_bytes()).await;
    let mut text = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut text)).await;
    assert!(read.is_ok(), "an answer within 30 s");
    let text = String::from_utf8_lossy(&text).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v == "chunked");
    let body = if chunked { unchunk(body) } else { body.to_string() };
    HttpAnswer { status, headers, body }
}

/// The data of a chunked body, as far as its chunks are complete.
pub fn unchunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size + 2 {
            break;
        }
        out.push_str(&rest[..size]);
        text = &rest[size + 2..];
    }
    out
}
