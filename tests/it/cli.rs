//! Flags and start-up errors: one clear line on stderr and a non-zero exit.

use std::process::Command;

use actcd::config::{listen_urls, Config};
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
