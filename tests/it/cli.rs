//! Flags and start-up errors: one clear line on stderr and a non-zero exit.

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use actcd::config::{listen_urls, load, Config, LoadError, Note};

use crate::harness::free_port;
use clap::Parser;

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

#[test]
fn flag_defaults_match_etcd() {
    let c = Config::parse_from(["actcd"]);
    assert_eq!((c.max_txn_ops, c.max_request_bytes, c.quota_bytes()), (128, 1_572_864, 2 << 30));
    assert_eq!(c.data_dir, std::path::PathBuf::from("default.actcd"));
    assert_eq!(c.listen_client_urls, ["http://127.0.0.1:2379"]);
    assert_eq!(c.batch_limit(), 10_000, "etcd's defaultBatchLimit");
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        (c.watch_shards, c.stream_threads),
        (cores, cores),
        "the tunables default to the machine's cores"
    );
    let tuned = Config::parse_from([
        "actcd",
        "--watch-shards",
        "3",
        "--stream-threads",
        "1",
        "--backend-batch-limit",
        "64",
    ]);
    assert_eq!((tuned.watch_shards, tuned.stream_threads, tuned.batch_limit()), (3, 1, 64));
    assert!(Config::try_parse_from(["actcd", "--watch-shards", "0"]).is_err(), "a server needs a shard");
    let client =
        listen_urls(&["https://127.0.0.1:2379".into(), "http://127.0.0.1:2380".into()], "x").unwrap();
    assert_eq!(client.iter().map(|(_, tls)| *tls).collect::<Vec<_>>(), [true, false]);
    assert!(listen_urls(&["127.0.0.1:2379".into()], "x").is_err());
    assert!(listen_urls(&["unix:///tmp/s".into()], "x").is_err());
    assert_eq!(
        listen_urls(&["http://localhost:0".into(), "http://127.0.0.1:1".into()], "x").unwrap().len(),
        2
    );
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

/// The environment of [`load`]: `pairs` as the process's variables.
fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect()
}

fn args(list: &[&str]) -> Vec<OsString> {
    std::iter::once("actcd").chain(list.iter().copied()).map(OsString::from).collect()
}

/// Every flag is also its ETCD_* variable, taken where the flag is not given; a variable
/// beside its flag, or with a value the flag refuses, stops the start with etcd's words.
#[test]
fn etcd_variables_fill_in_the_flags_not_given() {
    let env = vars(&[
        ("ETCD_NAME", "from-env"),
        ("ETCD_LISTEN_CLIENT_URLS", "http://127.0.0.1:1,http://127.0.0.1:2"),
        ("ETCD_CLIENT_CERT_AUTH", "true"),
        ("ETCD_EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL", "90s"),
        ("ETCD_NO_SUCH_FLAG", "1"),
        ("ETCDCTL_API", "3"),
    ]);
    let loaded = load(&args(&["--max-txn-ops", "7"]), &env).unwrap();
    let c = &loaded.config;
    assert_eq!(c.name, "from-env");
    assert_eq!(c.listen_client_urls, ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
    assert!(c.client_tls.client_cert_auth);
    assert_eq!(c.watch_progress_notify_interval, Duration::from_secs(90));
    assert_eq!(c.max_txn_ops, 7, "a flag with no variable is kept");
    assert!(loaded
        .notes
        .contains(&Note::Warn("unrecognized environment variable ETCD_NO_SUCH_FLAG=1".into())));
    assert!(loaded
        .notes
        .contains(&Note::Info("recognized and used environment variable ETCD_NAME=from-env".into())));
    assert!(!loaded.notes.iter().any(|n| format!("{n:?}").contains("ETCDCTL")), "not etcd's prefix");

    let shadowed = load(&args(&["--name", "flag"]), &vars(&[("ETCD_NAME", "env")])).unwrap_err();
    assert_eq!(
        shadowed.to_string(),
        r#"conflicting environment variable "ETCD_NAME" is shadowed by corresponding command-line flag (either unset environment variable or disable flag)"#
    );
    let shadowed = load(&args(&["--data-dir=d"]), &vars(&[("ETCD_DATA_DIR", "d")])).unwrap_err();
    assert!(matches!(shadowed, LoadError::ShadowedVariable(ref key) if key == "ETCD_DATA_DIR"), "{shadowed}");

    let bad = load(&args(&[]), &vars(&[("ETCD_HEARTBEAT_INTERVAL", "abc")])).unwrap_err().to_string();
    assert!(bad.starts_with(r#"invalid value "abc" for ETCD_HEARTBEAT_INTERVAL: "#), "{bad}");
    let bad = load(&args(&[]), &vars(&[("ETCD_INITIAL_CLUSTER_STATE", "maybe")])).unwrap_err().to_string();
    assert!(bad.starts_with(r#"invalid value "maybe" for ETCD_INITIAL_CLUSTER_STATE"#), "{bad}");
}

/// etcd's YAML keys, TLS nested as etcd nests it, Go's types; with a file, flags and
/// variables are ignored (even ones that would conflict), as etcd ignores them.
#[test]
fn a_config_file_overrules_flags_and_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd.conf.yml");
    std::fs::write(
        &path,
        "name: from-file\n\
         data-dir: /var/lib/etcd\n\
         wal-dir:\n\
         enable-v2: true\n\
         heartbeat-interval: 50\n\
         election-timeout: 500\n\
         listen-client-urls: http://127.0.0.1:3379,http://127.0.0.1:3380\n\
         experimental-watch-progress-notify-interval: 1500000000\n\
         cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n\
         client-transport-security:\n  cert-file: /c.crt\n  key-file: /c.key\n  client-cert-auth: true\n  client-cert-file: /x\n\
         peer-transport-security:\n  trusted-ca-file: /ca.crt\n  auto-tls: true\n  allowed-cn: [member]\n\
         cert-file: /top-level-is-not-etcds\n",
    )
    .unwrap();
    let env = vars(&[("ETCD_NAME", "env"), ("ETCD_MAX_TXN_OPS", "3")]);
    let file = path.to_str().unwrap();
    let loaded = load(&args(&["--config-file", file, "--name", "flag", "--max-txn-ops=9"]), &env).unwrap();
    let c = &loaded.config;
    assert_eq!((c.name.as_str(), c.data_dir.to_str().unwrap()), ("from-file", "/var/lib/etcd"));
    assert_eq!((c.heartbeat_interval, c.election_timeout, c.max_txn_ops), (50, 500, 128));
    assert_eq!(c.listen_client_urls, ["http://127.0.0.1:3379", "http://127.0.0.1:3380"]);
    assert_eq!(c.watch_progress_notify_interval, Duration::from_millis(1500));
    assert_eq!(c.cipher_suites.len(), 2);
    assert_eq!(c.client_tls.cert_file.as_deref(), Some(std::path::Path::new("/c.crt")));
    assert_eq!(c.client_tls.key_file.as_deref(), Some(std::path::Path::new("/c.key")));
    assert!(c.client_tls.client_cert_auth && c.peer_tls.auto_tls);
    assert_eq!(c.peer_tls.trusted_ca_file.as_deref(), Some(std::path::Path::new("/ca.crt")));
    assert_eq!(c.peer_cert_allowed_cn.as_deref(), Some("member"));
    assert!(
        c.client_tls.trusted_ca_file.is_none() && !c.client_tls.auto_tls,
        "client and peer TLS stay apart"
    );
    assert!(loaded
        .notes
        .iter()
        .any(|n| matches!(n, Note::Info(l) if l.starts_with("Loading server configuration from"))));
    assert!(
        loaded.notes.contains(&Note::Warn(
            "ignoring config file keys actcd has no setting for: wal-dir, enable-v2, client-transport-security.client-cert-file, cert-file".into()
        )),
        "{:?}",
        loaded.notes
    );

    // ETCD_CONFIG_FILE names the file as the flag does.
    let by_variable = load(&args(&[]), &vars(&[("ETCD_CONFIG_FILE", file)])).unwrap();
    assert_eq!(by_variable.config.name, "from-file");

    let refused = |text: &str| {
        std::fs::write(&path, text).unwrap();
        load(&args(&["--config-file", file]), &[]).unwrap_err().to_string()
    };
    assert!(refused("name: 123\n").ends_with("name: expected a string"));
    assert!(refused("heartbeat-interval: \"100\"\n").ends_with("heartbeat-interval: expected a whole number"));
    assert!(refused("experimental-watch-progress-notify-interval: 5s\n").contains("whole nanoseconds"));
    assert!(refused("client-transport-security:\n  client-cert-auth: yes please\n")
        .ends_with("expected true or false"));
    assert!(refused("initial-cluster-state: maybe\n").contains("'maybe'"), "the flag's own parser checks it");
    assert!(refused("- a\n- b\n").ends_with("not a map of etcd's configuration keys"));
    assert!(refused("name: [unclosed\n").contains("not YAML"));
    std::fs::remove_file(&path).unwrap();
    assert!(load(&args(&["--config-file", file]), &[]).unwrap_err().to_string().contains("cannot read it"));
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
    assert!(text.contains(&format!("etcd API Version: {}\n", actcd::grpc::maintenance::SERVER_VERSION)));
    assert!(text.contains("Rust Version: rustc 1."), "{text}");
}

/// What a subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged(log_level: &str) -> String {
    let written = Written::default();
    let sink = written.clone();
    let filter = tracing_subscriber::EnvFilter::try_new(actcd::config::tracing_filter(log_level)).unwrap();
    let subscriber =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(move || sink.clone()).finish();
    tracing::subscriber::with_default(subscriber, || {
        tracing::error!(target: "openraft::replication", "replication to a down peer failed");
        tracing::error!(target: "openraft::core::raft_core", "timeout while requesting vote");
        tracing::error!(target: "openraft::core::sm::worker", "the state machine failed");
        tracing::error!(target: "openraft::storage::callback", "LogFlush error");
        tracing::info!(target: "actcd::cluster", "leader elected");
    });
    let written = written.0.lock().unwrap().clone();
    String::from_utf8(written).unwrap()
}

#[test]
fn openraft_keeps_its_quiet_modules_errors_and_drops_the_peer_noise() {
    let info = logged("info");
    assert!(info.contains("the state machine failed") && info.contains("LogFlush error"), "{info}");
    assert!(!info.contains("down peer") && !info.contains("requesting vote"), "{info}");
    assert!(info.contains("leader elected"), "{info}");
    let error = logged("error");
    assert!(error.contains("the state machine failed") && !error.contains("leader elected"), "{error}");
    assert!(logged("debug").contains("down peer"));
}
