//! The Raft log under a single member: every write goes through it, a kill -9 loses nothing
//! acknowledged (the log is replayed over the state machine, which writes without an fsync of
//! its own), and `--snapshot-count` applied commands bring a snapshot, after which the log
//! is purged and a restart still finds every write.

use std::path::Path;

use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};

use crate::harness::Server;

fn snapshots(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("raft-snapshots")) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("snap-"))
        .collect()
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9_and_a_snapshot_purges_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::actcd(dir.path(), &["--snapshot-count", "100"]).await;
    let mut kv = server.kv().await;
    let mut last = 0;
    for i in 0..250 {
        let put = PutRequest {
            key: format!("k{i:03}").into(),
            value: format!("v{i}").into(),
            ..Default::default()
        };
        last = kv.put(put).await.unwrap().into_inner().header.unwrap().revision;
    }
    assert_eq!(last, 251, "one revision per put, through the log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while snapshots(dir.path()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no snapshot after 250 puts with --snapshot-count 100");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(snapshots(dir.path()).len(), 1, "only the newest snapshot is kept");
    server.kill();

    let server = Server::actcd(dir.path(), &["--snapshot-count", "100"]).await;
    let mut kv = server.kv().await;
    let all = RangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
    let read = kv.range(all).await.unwrap().into_inner();
    assert_eq!(read.count, 250, "every acknowledged put is there after kill -9");
    assert_eq!(read.header.unwrap().revision, last);
    assert_eq!(read.kvs.last().map(|kv| kv.value.to_vec()), Some(b"v249".to_vec()));
    let put = PutRequest { key: "after".into(), ..Default::default() };
    let revision = kv.put(put).await.unwrap().into_inner().header.unwrap().revision;
    assert_eq!(revision, last + 1, "revisions go on where they stopped");
}

/// A data dir as the single-node actcd before the Raft log wrote it (no log, no vote, no
/// applied log id: its writes committed straight to the store with their own fsync, the
/// applied index a count of commands) opens in place: its keys and revisions are there, and
/// the member forms its one-member cluster over them and goes on from the same revision.
#[tokio::test]
async fn a_data_dir_from_before_the_raft_log_opens_in_place() {
    use actcd_actors::store::{Batch, Command, RocksEngine, StoreConfig, StoreCore};
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = RocksEngine::open(dir.path()).unwrap();
        let mut core = StoreCore::open(engine, StoreConfig::default()).unwrap();
        let mut batch = Batch::default();
        for i in 0..3 {
            let put = PutRequest { key: format!("old{i}").into(), value: "v".into(), ..Default::default() };
            core.apply(&Command::Put(put), &mut batch).unwrap();
        }
        core.commit(batch).unwrap();
    }
    let server = Server::actcd(dir.path(), &[]).await;
    let mut kv = server.kv().await;
    let old = RangeRequest { key: "old".into(), range_end: "olf".into(), ..Default::default() };
    let read = kv.range(old).await.unwrap().into_inner();
    assert_eq!((read.count, read.header.unwrap().revision), (3, 4));
    let put = PutRequest { key: "new".into(), ..Default::default() };
    assert_eq!(kv.put(put).await.unwrap().into_inner().header.unwrap().revision, 5);
}
