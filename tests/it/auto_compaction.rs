//! etcd's `--auto-compaction-mode` and `--auto-compaction-retention`: read from flags, ETCD_*
//! variables and the config file as etcd 3.4 reads them, refused in its words, and a periodic
//! schedule that compacts where etcd's does under the same writes. (Revision mode compacts every
//! 5 minutes, as etcd's: its schedule is tested with the time as a parameter, in
//! store/src/auto_compaction.rs.)

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use actcd_edge::config::load;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{HashKvRequest, PutRequest};
use actcd_store::auto_compaction::AutoCompaction;

use crate::harness::{etcd_binary, Server};

fn refusal(binary: &std::path::Path, flags: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(binary)
        .args(["--data-dir", dir.path().join("d").to_str().unwrap()])
        .args(["--listen-client-urls", "http://127.0.0.1:0", "--advertise-client-urls", "http://127.0.0.1:1"])
        .args(["--listen-peer-urls", "http://127.0.0.1:0", "--listen-metrics-urls", "http://127.0.0.1:0"])
        .args(flags)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{flags:?} must be refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_flags_read_as_etcd_reads_them_and_bad_ones_are_refused_in_its_words() {
    let actcd = std::path::Path::new(env!("CARGO_BIN_EXE_actcd"));
    for (flags, words) in [
        (
            &["--auto-compaction-mode", "daily", "--auto-compaction-retention", "1"][..],
            r#"unknown auto-compaction-mode "daily""#,
        ),
        (&["--auto-compaction-retention", "abc"][..], "error parsing CompactionRetention: "),
    ] {
        let (ours, etcds) = (refusal(actcd, flags), refusal(&etcd_binary(), flags));
        assert!(etcds.contains(words), "etcd: {etcds}");
        assert!(ours.contains(words), "actcd: {ours}");
        assert_eq!(ours.lines().count(), 1, "{ours}");
    }

    let os = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
    let read = |args: &[&str], vars: &[(&str, &str)]| {
        let vars: Vec<_> = vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        load(&os(args), &vars).unwrap().config.auto_compaction().unwrap()
    };
    assert_eq!(read(&["actcd"], &[]), AutoCompaction::Off, "etcd's default: retention 0");
    assert_eq!(
        read(&["actcd", "--auto-compaction-retention", "1"], &[]),
        AutoCompaction::Periodic(Duration::from_secs(3600)),
        "a whole number is hours"
    );
    assert_eq!(
        read(
            &["actcd"],
            &[("ETCD_AUTO_COMPACTION_MODE", "revision"), ("ETCD_AUTO_COMPACTION_RETENTION", "1000")]
        ),
        AutoCompaction::Revision(1000)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.yml");
    std::fs::write(&file, "auto-compaction-mode: periodic\nauto-compaction-retention: \"90m\"\n").unwrap();
    assert_eq!(
        read(&["actcd", "--config-file", file.to_str().unwrap()], &[]),
        AutoCompaction::Periodic(Duration::from_secs(5400))
    );
}

/// Ten puts a second for 7 s, from when the server answers, with a retention of 2 s: etcd
/// compacts at 2, 4 and 6 s, each time to the revision sampled 2.2 s before (11 samples of
/// 200 ms); actcd must end at etcd's compacted revision, give or take the timing of a start.
async fn compacted_after_writes(server: &Server) -> i64 {
    let mut kv = server.kv().await;
    let start = tokio::time::Instant::now();
    for i in 0..70u32 {
        let put = PutRequest { key: format!("k{}", i % 7).into(), value: "v".into(), ..Default::default() };
        kv.put(put).await.unwrap();
        tokio::time::sleep_until(start + Duration::from_millis(100) * (i + 1)).await;
    }
    let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
    maintenance.hash_kv(HashKvRequest { revision: 0 }).await.unwrap().into_inner().compact_revision
}

#[tokio::test]
async fn a_periodic_retention_compacts_where_etcds_does() {
    let flags = ["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "2s"];
    let (etcd_dir, actcd_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Started together: each schedule counts from its own start, so a start slower by 0.1 s
    // moves its compactions one put later.
    let (etcd, actcd) =
        tokio::join!(Server::etcd_with(etcd_dir.path(), &flags), Server::actcd(actcd_dir.path(), &flags));
    let (etcds, ours) = tokio::join!(compacted_after_writes(&etcd), compacted_after_writes(&actcd));
    // At 6 s the sample of 3.8 s: revision ~39 of 71.
    assert!((25..=55).contains(&etcds), "etcd compacted to {etcds}");
    assert!((ours - etcds).abs() <= 8, "actcd compacted to {ours}, etcd to {etcds}");
}
