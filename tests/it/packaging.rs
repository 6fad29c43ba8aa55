//! What a Debian operator installs: the .deb that scripts/deb.sh builds, its systemd unit,
//! and the unit's `Type=notify` readiness. Installing the package is checked in a fresh root
//! (scripts/deb-check.sh), never on the machine the tests run on: here it is built and read.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{free_port, peer_flags};

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The package holds the binary, the unit and /etc/default/actcd (a conffile), with etcd's
/// maintainer-script duties; `systemd-analyze verify` finds nothing to say about the unit.
#[test]
fn the_debian_package_holds_the_binary_the_unit_and_its_defaults() {
    let out = tempfile::tempdir().unwrap();
    let built = Command::new("bash")
        .arg(workspace().join("scripts/deb.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_actcd"), "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let deb = PathBuf::from(String::from_utf8(built.stdout).unwrap().trim());
    let dpkg_deb = |args: &[&str]| {
        let run = Command::new("dpkg-deb").args(args).arg(&deb).output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        String::from_utf8(run.stdout).unwrap()
    };
    let files = dpkg_deb(&["--contents"]);
    for path in ["./usr/bin/actcd", "./lib/systemd/system/actcd.service", "./etc/default/actcd"] {
        assert!(files.lines().any(|l| l.ends_with(path)), "{path} missing:\n{files}");
    }
    assert_eq!(dpkg_deb(&["--field"]).lines().next(), Some("Package: actcd"));
    let extracted = out.path().join("tree");
    let unpacked = Command::new("dpkg-deb").arg("--raw-extract").arg(&deb).arg(&extracted).status().unwrap();
    assert!(unpacked.success());
    assert_eq!(std::fs::read_to_string(extracted.join("DEBIAN/conffiles")).unwrap(), "/etc/default/actcd\n");
    let postinst = std::fs::read_to_string(extracted.join("DEBIAN/postinst")).unwrap();
    assert!(postinst.contains("adduser --system --group"), "{postinst}");

    let unit = std::fs::read_to_string(extracted.join("lib/systemd/system/actcd.service")).unwrap();
    for line in
        ["Type=notify", "Restart=on-failure", "LimitNOFILE=65536", "ExecStart=/usr/bin/actcd $DAEMON_ARGS"]
    {
        assert!(unit.lines().any(|l| l == line), "{line} missing from the unit");
    }
    // The packaged binary runs and is the one given.
    let version = Command::new(extracted.join("usr/bin/actcd")).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("actcd Version: "));
    // verify checks the binary exists: point ExecStart at the packaged one.
    let checked = out.path().join("actcd.service");
    let binary = extracted.join("usr/bin/actcd");
    std::fs::write(&checked, unit.replace("/usr/bin/actcd", binary.to_str().unwrap())).unwrap();
    let verify = Command::new("systemd-analyze").arg("verify").arg(&checked).output().unwrap();
    let said =
        format!("{}{}", String::from_utf8_lossy(&verify.stdout), String::from_utf8_lossy(&verify.stderr));
    assert!(verify.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
}

/// A notify socket as systemd's: datagrams of `KEY=value` lines.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        NotifySocket { socket, path, _dir: dir }
    }

    /// The next datagram within `within`, if one comes.
    fn next(&self, within: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

/// An actcd process killed when the test ends.
struct Member(std::process::Child);

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn member(dir: &Path, name: &str, client: u16, peer: &str, initial: &str, notify: Option<&Path>) -> Member {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_actcd"));
    cmd.args(["--name", name, "--data-dir"])
        .arg(dir.join(name))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--listen-metrics-urls=http://127.0.0.1:{}", free_port()))
        .args(peer_flags(peer, initial))
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match notify {
        Some(path) => cmd.env("NOTIFY_SOCKET", path),
        None => cmd.env_remove("NOTIFY_SOCKET"),
    };
    Member(cmd.spawn().unwrap())
}

/// READY=1 comes once the member serves (a put at that moment succeeds, no retry), and
/// STOPPING=1 when SIGTERM starts its shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn systemd_hears_ready_once_the_member_serves_and_stopping_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::new();
    let (client, peer) = (free_port(), format!("http://127.0.0.1:{}", free_port()));
    let mut actcd = member(dir.path(), "m1", client, &peer, &format!("m1={peer}"), Some(&notify.path));
    let started = Instant::now();
    let ready = tokio::task::block_in_place(|| notify.next(Duration::from_secs(60)));
    assert_eq!(ready.as_deref(), Some("READY=1\n"), "after {:?}", started.elapsed());
    let mut kv = etcd_client::Client::connect([format!("http://127.0.0.1:{client}")], None).await.unwrap();
    kv.put("after-ready", "yes", None).await.expect("a member that said READY=1 takes a write");

    let pid = i32::try_from(actcd.0.id()).unwrap();
    assert_eq!(sigterm(pid), 0);
    let stopping = tokio::task::block_in_place(|| notify.next(Duration::from_secs(20)));
    assert_eq!(stopping.as_deref(), Some("STOPPING=1\n"));
    assert!(actcd.0.wait().unwrap().success(), "a SIGTERM ends it cleanly");
}

/// SIGTERM, as systemd's stop sends it.
fn sigterm(pid: i32) -> i32 {
    Command::new("kill").args(["-TERM", &pid.to_string()]).status().map_or(-1, |s| s.code().unwrap_or(-1))
}

/// As etcd's, a member's READY=1 waits for its cluster: one member of three alone stays
/// "activating"; once a second member makes a quorum it is ready.
#[test]
fn a_member_without_a_quorum_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::new();
    let peers: Vec<String> = (0..3).map(|_| format!("http://127.0.0.1:{}", free_port())).collect();
    let initial: Vec<String> = peers.iter().enumerate().map(|(i, p)| format!("m{i}={p}")).collect();
    let initial = initial.join(",");
    let _first = member(dir.path(), "m0", free_port(), &peers[0], &initial, Some(&notify.path));
    assert_eq!(notify.next(Duration::from_secs(5)), None, "ready without a quorum");
    let _second = member(dir.path(), "m1", free_port(), &peers[1], &initial, None);
    assert_eq!(notify.next(Duration::from_secs(60)).as_deref(), Some("READY=1\n"));
}
