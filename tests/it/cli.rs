//! Flags and start-up errors as the binary shows them: one clear line on stderr and a non-zero
//! exit. How the flags, variables and config file are read is tested without a process, in
//! edge/src/config/.

use std::process::Command;
use std::time::Duration;

use actcd_edge::config::Config;
use actcd_raft::cluster::initial_cluster::{
    DEFAULT_ADVERTISE_PEER_URL, DEFAULT_CLUSTER_TOKEN, DEFAULT_INITIAL_CLUSTER, DEFAULT_NAME,
};
use clap::Parser;

use crate::harness::free_port;

/// Runs actcd with `args`, its metrics on a port of the system's choosing: the default,
/// 127.0.0.1:2381, may be held by the Prometheus test running alongside (grafana/prometheus.yml
/// scrapes it), and a busy port would fail the start before the error under test.
fn actcd(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_actcd"))
        .args(args)
        .args(["--listen-metrics-urls", "http://127.0.0.1:0"])
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The bootstrap flags' defaults are the ones the initial cluster's reading takes for "not
/// given" (a member named other than `default` on the default `--initial-cluster` bootstraps
/// alone): the flags are declared in actcd-edge, the reading is actcd-raft's.
#[test]
fn the_bootstrap_flags_default_to_what_membership_takes_for_not_given() {
    let c = Config::parse_from(["actcd"]);
    assert_eq!(c.name, DEFAULT_NAME);
    assert_eq!(c.initial_cluster, DEFAULT_INITIAL_CLUSTER);
    assert_eq!(c.initial_advertise_peer_urls, [DEFAULT_ADVERTISE_PEER_URL]);
    assert_eq!(c.initial_cluster_token, DEFAULT_CLUSTER_TOKEN);
}

#[test]
fn bad_flags_and_data_dirs_fail_in_one_line() {
    let (code, err) = actcd(&["--no-such-flag"]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");

    let (code, err) = actcd(&["--max-txn-ops", "many"]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("member"), b"some other program's data").unwrap();
    let (code, err) =
        actcd(&["--data-dir", dir.path().to_str().unwrap(), "--listen-client-urls", "http://127.0.0.1:0"]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("holds no actcd database"), "{err}");

    let file = dir.path().join("member");
    let (code, err) = actcd(&["--data-dir", file.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot create data dir"), "{err}");

    let (code, err) = actcd(&["--listen-client-urls", "unix:///tmp/x"]);
    assert_ne!(code, 0);
    assert!(err.contains("not an http:// or https:// URL"), "{err}");
}

/// A child process killed when the test ends, however it ends.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `etcdctl member list -w json` against `endpoint` once it answers (within 20 s), without its
/// header's revision and term, which differ between two servers' histories.
fn member_list(endpoint: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new(crate::harness::etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoint, "--dial-timeout=1s", "member", "list", "-w", "json"])
            .output()
            .unwrap();
        if out.status.success() {
            let mut list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let header = list["header"].as_object_mut().unwrap();
            header.remove("revision");
            header.remove("raft_term");
            return list;
        }
        assert!(std::time::Instant::now() < deadline, "{endpoint} never answered");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The same config file starts etcd 3.4 and actcd as the same member of the same cluster
/// (ids, name, URLs), ignoring a flag and a variable that contradict it on both; and both
/// refuse a variable that a flag shadows in the same words.
#[test]
fn one_config_file_starts_etcd_and_actcd_as_the_same_member() {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer, metrics) = (free_port(), free_port(), free_port());
    let conf = |data: &str| {
        let path = dir.path().join(format!("{data}.yml"));
        std::fs::write(
            &path,
            format!(
                "name: infra7\n\
                 data-dir: {}\n\
                 listen-client-urls: http://127.0.0.1:{client}\n\
                 advertise-client-urls: http://127.0.0.1:{client}\n\
                 listen-peer-urls: http://127.0.0.1:{peer}\n\
                 initial-advertise-peer-urls: http://127.0.0.1:{peer}\n\
                 initial-cluster: infra7=http://127.0.0.1:{peer}\n\
                 initial-cluster-token: from-the-file\n\
                 listen-metrics-urls: http://127.0.0.1:{metrics}\n",
                dir.path().join(data).display()
            ),
        )
        .unwrap();
        path
    };
    let endpoint = format!("127.0.0.1:{client}");
    let start = |binary: &std::path::Path, file: &std::path::Path| {
        Running(
            Command::new(binary)
                .env("ETCD_INITIAL_CLUSTER_TOKEN", "from-the-environment")
                .args(["--config-file", file.to_str().unwrap(), "--name", "from-a-flag"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let etcd = start(&crate::harness::etcd_binary(), &conf("etcd"));
    let etcd_members = member_list(&endpoint);
    drop(etcd);
    let actcd = start(std::path::Path::new(env!("CARGO_BIN_EXE_actcd")), &conf("actcd"));
    let actcd_members = member_list(&endpoint);
    drop(actcd);
    assert_eq!(actcd_members, etcd_members);
    assert_eq!(actcd_members["members"][0]["name"], "infra7");

    let refusal = |binary: &std::path::Path| {
        let out = Command::new(binary)
            .env("ETCD_NAME", "env")
            .args(["--name", "flag", "--data-dir", dir.path().join("never").to_str().unwrap()])
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let words = r#"conflicting environment variable "ETCD_NAME" is shadowed by corresponding command-line flag (either unset environment variable or disable flag)"#;
    assert!(refusal(&crate::harness::etcd_binary()).contains(words));
    assert!(refusal(std::path::Path::new(env!("CARGO_BIN_EXE_actcd"))).contains(words));
}

/// `--version` prints etcd's lines for actcd: the server's version, the etcd API it reports,
/// how it was built.
#[test]
fn version_prints_what_etcd_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_actcd")).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = text.lines().map(|l| l.split(": ").next().unwrap()).collect();
    assert_eq!(keys, ["actcd Version", "etcd API Version", "Git SHA", "Rust Version", "OS/Arch"], "{text}");
    assert!(text.starts_with(&format!("actcd Version: {}\n", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains(&format!("etcd API Version: {}\n", actcd_edge::SERVER_VERSION)));
    assert!(text.contains("Rust Version: rustc 1."), "{text}");
}
