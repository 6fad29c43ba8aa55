//! The servers `measure` starts itself: actcd or etcd on loopback (the shared launcher of
//! `actcd_test_support::server`), each on a fresh data dir under the run's temp dir, with equal
//! durability (both fsync before acknowledging) and a backend quota large enough for etcd's
//! storage-memory rows. Stopped by its own pid; the data dir and log go with it.

use actcd_test_support::server::{Kind, Launch, Server};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where the binary is when `--server-bin` is not given: actcd next to this executable (one
/// `cargo build` puts both in the same target dir), etcd on PATH or Debian's /usr/bin/etcd.
pub fn default_binary(kind: Kind) -> Result<PathBuf, String> {
    match kind {
        Kind::Actcd => {
            let me = std::env::current_exe().map_err(|e| format!("cannot locate actcd-tables: {e}"))?;
            let actcd = me.with_file_name("actcd");
            if actcd.is_file() {
                Ok(actcd)
            } else {
                Err(format!(
                    "actcd is not next to actcd-tables ({}): build it (cargo build --release -p actcd) or give --server-bin",
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
    pub async fn start(&self, name: &str, ready_within: Duration) -> Result<Server, String> {
        let quota = self.quota_bytes.to_string();
        Launch::new(self.kind, &self.binary, self.work.join(format!("{name}.data")))
            .name("bench")
            .args(&["--quota-backend-bytes", &quota])
            .log_to(self.work.join(format!("{name}.log")))
            .log_level("warn")
            .fresh()
            .start(ready_within)
            .await
            .map_err(|e| e.to_string())
    }
}
