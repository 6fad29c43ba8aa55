//! The Raft log under a single member: every write goes through it, a kill -9 loses nothing
//! acknowledged (the log is replayed over the state machine, which writes without an fsync of
//! its own), and `--snapshot-count` applied commands bring a snapshot, after which the log
//! is purged and a restart still finds every write. A tail torn by a stop in mid-write costs
//! nothing acknowledged; a record or store file rotted after it was synced stops the start.

use std::path::Path;

use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};

use crate::harness::{put_many, Server};

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
    let last = put_many(&mut kv, 250, |i| format!("k{i:03}")).await;
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
    use actcd_store::backend::codec::{encode_i64, APPLIED_KEY, LEGACY_APPLIED_INDEX_KEY};
    use actcd_store::backend::engine::{Engine, Family, WriteSet};
    use actcd_store::{Batch, Command, RocksEngine, StoreConfig, StoreCore};
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = RocksEngine::open(dir.path()).unwrap();
        let mut core = StoreCore::open(engine, StoreConfig::default()).unwrap();
        let mut batch = Batch::default();
        for i in 0..3 {
            let put = PutRequest { key: format!("old{i}").into(), value: "v".into(), ..Default::default() };
            core.apply(&Command::Put(put), &mut batch).unwrap();
        }
        core.commit_by_log(batch, core.applied_index() + 1).unwrap();
        // That store recorded a count of commands, under the old key, and no log position.
        let mut old = WriteSet::default();
        old.delete(Family::Meta, APPLIED_KEY.to_vec());
        old.put(Family::Meta, LEGACY_APPLIED_INDEX_KEY.to_vec(), encode_i64(3));
        core.engine().commit(&old).unwrap();
    }
    let server = Server::actcd(dir.path(), &[]).await;
    let mut kv = server.kv().await;
    let old = RangeRequest { key: "old".into(), range_end: "olf".into(), ..Default::default() };
    let read = kv.range(old).await.unwrap().into_inner();
    assert_eq!((read.count, read.header.unwrap().revision), (3, 4));
    let put = PutRequest { key: "new".into(), ..Default::default() };
    assert_eq!(kv.put(put).await.unwrap().into_inner().header.unwrap().revision, 5);
}

/// The last segment of the Raft log in `data_dir` (the one appended to), and where each of its
/// records starts (record: u32 length, u32 crc, u64 index, payload; zeros after the last).
fn last_segment(data_dir: &Path) -> (std::path::PathBuf, Vec<u64>) {
    let dir = data_dir.join("raft-wal");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".wal"))
        .collect();
    names.sort();
    let path = dir.join(names.last().expect("a segment"));
    let bytes = std::fs::read(&path).unwrap();
    let (mut at, mut offsets) = (0usize, Vec::new());
    while at + 16 <= bytes.len() && bytes[at..at + 16].iter().any(|b| *b != 0) {
        offsets.push(at as u64);
        at += 16 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    offsets.push(at as u64);
    (path, offsets)
}

/// Starts actcd on `data_dir` writing its log to `log`: Ok once it answers, Err when it exits.
async fn start_logged(data_dir: &Path, log: &Path) -> Result<Server, String> {
    let launch = Server::launch_actcd(data_dir, &[]).log_to(log);
    let started = launch.start(std::time::Duration::from_secs(60)).await;
    started.map(Server::from).map_err(|_| std::fs::read_to_string(log).unwrap_or_default())
}

async fn put_keys(server: &Server, n: usize) -> i64 {
    let mut kv = server.kv().await;
    let mut last = 0;
    for i in 0..n {
        let put = PutRequest {
            key: format!("k{i:03}").into(),
            value: vec![b'v'; 100].into(),
            ..Default::default()
        };
        last = kv.put(put).await.unwrap().into_inner().header.unwrap().revision;
    }
    last
}

/// A stop in mid-write leaves the log's last record torn: its header and first sector on disk,
/// its next sectors not (zeros), the bytes after it written. It was never synced, so never
/// acknowledged: the member starts, drops it with a warning, and has every acknowledged write.
#[tokio::test]
async fn a_log_tail_torn_in_mid_write_costs_nothing_acknowledged() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::actcd(dir.path(), &[]).await;
    let last = put_keys(&server, 50).await;
    server.kill();
    let (path, offsets) = last_segment(dir.path());
    let end = *offsets.last().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let next_index = u64::from(u32::MAX); // Any: a torn record's header may say anything.
    let mut torn = Vec::new();
    torn.extend_from_slice(&3000u32.to_le_bytes());
    torn.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    torn.extend_from_slice(&next_index.to_le_bytes());
    let first_sector_end = (end / 512 + 1) * 512;
    torn.resize((first_sector_end - end) as usize, 0x5a);
    torn.resize(torn.len() + 512, 0); // a sector that never reached the disk
    torn.resize(torn.len() + 1024, 0x5a); // later sectors of the same write that did
    file.write_all_at(&torn, end).unwrap();
    drop(file);

    let log = dir.path().join("actcd.log");
    let mut server = start_logged(dir.path(), &log).await.expect("a torn tail is no reason to refuse");
    let mut kv = server.kv().await;
    let all = RangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
    let read = kv.range(all.clone()).await.unwrap().into_inner();
    assert_eq!((read.count, read.header.unwrap().revision), (50, last), "every acknowledged put");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("torn by a stop in mid-write"), "{text}");
    let put = PutRequest { key: "k999".into(), ..Default::default() };
    assert_eq!(kv.put(put).await.unwrap().into_inner().header.unwrap().revision, last + 1);
    server.kill();
    // What the torn write left was cleared: the log reads back cleanly after new records.
    let server = Server::actcd(dir.path(), &[]).await;
    let read = server.kv().await.range(all).await.unwrap().into_inner();
    assert_eq!(read.count, 51);
}

/// A flipped byte in a record the log synced (the disk rotted, not a stop) is not a torn write:
/// the member refuses to start with one line naming the segment, rather than drop that record
/// and every later one. Likewise a flipped byte in the store's RocksDB files.
#[tokio::test]
async fn a_corrupt_log_or_store_file_refuses_the_start_with_one_line() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::actcd(dir.path(), &["--snapshot-count", "100"]).await;
    put_keys(&server, 60).await;
    server.kill();
    let (path, offsets) = last_segment(dir.path());
    let middle = offsets[offsets.len() / 2] + 16 + 4;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, middle).unwrap();
    file.write_all_at(&[byte[0] ^ 0x40], middle).unwrap();

    let log = dir.path().join("refused.log");
    let err = start_logged(dir.path(), &log).await.err().expect("a member with a corrupt log must not start");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("actcd:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("is corrupt") && lines[0].contains(".wal"), "{err}");

    // The log put right again, a store file rotted instead: its SST files hold the puts, as
    // the snapshot at 100 commands flushed them; the index rebuilt at start reads every block.
    file.write_all_at(&byte, middle).unwrap();
    drop(file);
    let mut server = Server::actcd(dir.path(), &["--snapshot-count", "10"]).await;
    put_keys(&server, 30).await;
    server.kill();
    let sst = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max_by_key(|p| p.metadata().unwrap().len())
        .expect("an SST file");
    // Hard links: the snapshot's copy is the same file. Rewrite a copy so only the live one rots.
    let mut bytes = std::fs::read(&sst).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x40;
    std::fs::remove_file(&sst).unwrap();
    std::fs::write(&sst, &bytes).unwrap();
    let err =
        start_logged(dir.path(), &log).await.err().expect("a member with a corrupt store must not start");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("actcd:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].to_lowercase().contains("corrupt"), "{err}");
}
