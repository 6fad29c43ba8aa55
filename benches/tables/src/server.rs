//! The servers the tables start themselves: actcd or etcd on loopback (the shared launcher of
//! `actcd_test_support::server`), each on a fresh data dir under the run's temp dir, with equal
//! durability (both fsync before acknowledging) and a backend quota large enough for etcd's
//! storage-memory rows; and a load run on one under a stop of its own. Stopped by its own pid;
//! the data dir and log go with it.

use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_test_support::server::{Kind, Launch, Server};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;

/// Where the binary is when none is given: actcd next to this executable (one `cargo build`
/// puts both in the same target dir), etcd on PATH or Debian's /usr/bin/etcd.
fn default_binary(kind: Kind) -> Result<PathBuf, String> {
    match kind {
        Kind::Actcd => {
            let me = std::env::current_exe().map_err(|e| format!("cannot locate actcd-tables: {e}"))?;
            let actcd = me.with_file_name("actcd");
            match actcd.is_file() {
                true => Ok(actcd),
                false => Err(format!(
                    "actcd is not next to actcd-tables ({}): build it (cargo build --release -p actcd) or give its binary",
                    actcd.display()
                )),
            }
        }
        Kind::Etcd => std::env::var_os("PATH")
            .and_then(|path| std::env::split_paths(&path).map(|d| d.join("etcd")).find(|p| p.is_file()))
            .or_else(|| Some(PathBuf::from("/usr/bin/etcd")).filter(|p| p.is_file()))
            .ok_or_else(|| {
                "etcd not found on PATH (Debian: apt-get install etcd-server) or give its binary".to_string()
            }),
    }
}

pub fn work_dir(parent: &Path) -> Result<TempDir, String> {
    tempfile::Builder::new()
        .prefix("actcd-tables.")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a temp dir in {}: {e}", parent.display()))
}

/// How to start servers of one kind: the binary, where data dirs and logs go (a temp dir the
/// caller owns), and `--quota-backend-bytes`.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kind: Kind,
    pub binary: PathBuf,
    pub work: PathBuf,
    pub quota_bytes: u64,
}

impl Spec {
    pub fn new(kind: Kind, binary: Option<PathBuf>, work: &Path, quota_bytes: u64) -> Result<Self, String> {
        let binary = binary.map_or_else(|| default_binary(kind), Ok)?;
        Ok(Self { kind, binary, work: work.to_path_buf(), quota_bytes })
    }

    /// The binary's version line (`etcd Version: 3.4.23`, `actcd 0.1.0`), empty when it has none.
    pub fn version(&self) -> String {
        let out =
            Command::new(&self.binary).arg("--version").stdin(Stdio::null()).stderr(Stdio::null()).output();
        let text = out.ok().and_then(|o| String::from_utf8(o.stdout).ok()).unwrap_or_default();
        text.lines().next().unwrap_or_default().trim().to_string()
    }

    /// Starts a server named `name` (its data dir and log under `work`; a data dir of that name
    /// is removed first) and waits until it answers gRPC, at most 30 s.
    pub async fn start(&self, name: &str) -> Result<Server, String> {
        Launch::new(self.kind, &self.binary, self.work.join(format!("{name}.data")))
            .name("bench")
            .args(&["--quota-backend-bytes", &self.quota_bytes.to_string()])
            .log_to(self.work.join(format!("{name}.log")))
            .log_level("warn")
            .fresh()
            .start(Duration::from_secs(30))
            .await
            .map_err(|e| e.to_string())
    }

    /// Runs `load` on a server of its own, started as `name`, under a stop of its own that
    /// `stop` sets too, as does `limit` when given; its result, or why no server started.
    pub async fn on_fresh<T>(
        &self,
        name: &str,
        stop: &Stop,
        limit: Option<Duration>,
        load: impl AsyncFnOnce(&mut Server, &Stop) -> T,
    ) -> Result<T, String> {
        let mut server = self.start(name).await?;
        let (own, forward) = stop.child();
        let deadline = limit.map(|l| own.after(l));
        let result = load(&mut server, &own).await;
        forward.abort();
        deadline.inspect(|d| d.abort());
        Ok(result)
    }
}

/// Why a started server is of no more use: the end of its log when it died.
pub fn died(server: &mut Server) -> Option<String> {
    (!server.alive())
        .then(|| format!("the server died during the row; the end of its log: {}", server.log_tail()))
}

/// The load client's settings for `conns` connections and `clients` clients to `server`, its
/// reports kept for the JSON.
pub fn settings_for(base: &Settings, server: &Server, conns: usize, clients: usize) -> Settings {
    Settings {
        endpoints: vec![server.endpoint.clone()],
        conns,
        clients,
        sample: false,
        json: true,
        ..base.clone()
    }
}
