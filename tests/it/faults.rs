//! Disk faults: a full disk, a quota smaller than the disk, and fsync errors injected with libfiu.
//! A failed write or fsync stops the server (fail-stop, as etcd does): nothing is acknowledged
//! after it, the process exits non-zero, and a restart finds every acknowledged write.
//!
//! The full-disk tests mount a small tmpfs as the data dir, so they need root; a failed mount
//! fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use tonic::Code;

use crate::harness::Server;

/// A tmpfs mounted on a fresh temporary directory, unmounted when dropped (declare it before
/// the server that uses it, so the server is stopped first).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u32) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount(8) runs");
        assert!(
            out.status.success(),
            "cannot mount a {mib} MiB tmpfs on {} (the disk-full tests need root): {}",
            dir.path().display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    /// Grows (or shrinks) the mounted tmpfs, keeping its files.
    fn resize(&self, mib: u32) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,size={mib}m")])
            .arg(self.dir.path())
            .output()
            .expect("mount(8) runs");
        assert!(out.status.success(), "remount failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn available_bytes(&self) -> u64 {
        let out = Command::new("df").args(["-B1", "--output=avail"]).arg(self.dir.path()).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).and_then(|l| l.trim().parse().ok()).unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let path = self.dir.path();
        let unmounted = Command::new("umount").arg(path).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Something still holds a file open: detach now, the kernel frees it when let go.
            let _ = Command::new("umount").arg("-l").arg(path).status();
        }
    }
}

/// The value each put writes: derived from the key, so it need not be kept to be checked, and
/// incompressible, so the disk fills at the rate the test means.
fn value_of(key: &str, len: usize) -> Vec<u8> {
    let mut state =
        key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

struct Acked {
    key: String,
    revision: i64,
    started: Instant,
}

struct Refused {
    code: Code,
    message: String,
    received: Instant,
}

#[derive(Default)]
struct Log {
    acked: Vec<Acked>,
    refused: Vec<Refused>,
}

/// `writers` clients, each on its own connection, put `value_len`-byte values without retrying
/// until their first error (or until `deadline`, which fails the test).
async fn put_until_refused(
    server: &Server,
    writers: usize,
    value_len: usize,
    acked_count: Arc<AtomicUsize>,
    deadline: Duration,
) -> Log {
    let log = Arc::new(Mutex::new(Log::default()));
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let mut kv = server.kv().await;
        let log = Arc::clone(&log);
        let acked_count = Arc::clone(&acked_count);
        tasks.push(tokio::spawn(async move {
            let until = Instant::now() + deadline;
            for seq in 0.. {
                assert!(Instant::now() < until, "writer {writer}: no write was refused within {deadline:?}");
                let key = format!("w{writer}/{seq:06}");
                let put = PutRequest {
                    key: key.clone().into(),
                    value: value_of(&key, value_len).into(),
                    ..Default::default()
                };
                let started = Instant::now();
                let answer = tokio::time::timeout(Duration::from_secs(20), kv.put(put)).await;
                let mut log = log.lock().unwrap();
                match answer {
                    Ok(Ok(resp)) => {
                        let revision = resp.into_inner().header.unwrap().revision;
                        log.acked.push(Acked { key, revision, started });
                        acked_count.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(status)) => {
                        let (code, message) = (status.code(), status.message().to_owned());
                        log.refused.push(Refused { code, message, received: Instant::now() });
                        return;
                    }
                    Err(_) => panic!("writer {writer}: a put got no answer within 20 s"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap()
}

/// Nothing acknowledged after the first refusal: every acknowledged put started before any
/// client had seen an error, and (if given) before the fault was injected.
fn assert_nothing_acked_after_the_fault(log: &Log, fault_injected: Option<Instant>) {
    let first_refusal = log.refused.iter().map(|r| r.received).min().expect("some put was refused");
    let late: Vec<_> = log.acked.iter().filter(|a| a.started >= first_refusal).map(|a| &a.key).collect();
    assert!(late.is_empty(), "acknowledged after the first refusal: {late:?}");
    if let Some(fault) = fault_injected {
        let late: Vec<_> = log.acked.iter().filter(|a| a.started >= fault).map(|a| &a.key).collect();
        assert!(late.is_empty(), "acknowledged though started after the fault was injected: {late:?}");
    }
    let mut revisions: Vec<i64> = log.acked.iter().map(|a| a.revision).collect();
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), log.acked.len(), "two acknowledged puts share a revision");
}

/// Every acknowledged put reads back with its value at its revision.
async fn assert_all_acked_present(server: &Server, log: &Log, value_len: usize) {
    let mut kv = server.kv().await;
    for acked in &log.acked {
        let resp =
            kv.range(RangeRequest { key: acked.key.clone().into(), ..Default::default() }).await.unwrap();
        let kvs = resp.into_inner().kvs;
        let found = kvs
            .first()
            .unwrap_or_else(|| panic!("acknowledged {} (revision {}) is lost", acked.key, acked.revision));
        assert_eq!(found.mod_revision, acked.revision, "{} at another revision", acked.key);
        assert!(found.value[..] == value_of(&acked.key, value_len)[..], "{} has another value", acked.key);
    }
}

/// How a write may end when the server fail-stops: refused with etcd's "server stopped", or cut
/// off by the exit (tonic reports a dropped connection as Unknown "transport error", or, when
/// h2 sees the socket close mid-frame, as Cancelled "h2 protocol error"; etcd's Go clients as
/// Unavailable "transport is closing").
fn is_fail_stop(refused: &Refused) -> bool {
    refused.code == Code::Unavailable
        || (refused.code, refused.message.as_str()) == (Code::Unknown, "transport error")
        || (refused.code == Code::Cancelled && refused.message.starts_with("h2 protocol error"))
}

fn describe(refused: &[Refused]) -> String {
    let mut kinds: Vec<String> = refused.iter().map(|r| format!("{:?}: {}", r.code, r.message)).collect();
    kinds.sort();
    kinds.dedup();
    kinds.join(" | ")
}

/// A tmpfs data dir fills up under 4 writers: the write that hits ENOSPC is refused, the server
/// exits non-zero (as etcd's fatal WAL error does), nothing is acknowledged after the first
/// refusal, and once the tmpfs is grown a restart finds every acknowledged put.
#[tokio::test]
async fn full_disk_stops_the_server_and_a_restart_keeps_every_acknowledged_write() {
    let disk = Tmpfs::mount(24);
    let value_len = 8 << 10;
    let mut server = Server::actcd(&disk.data_dir(), &[]).await;
    let started = Instant::now();
    let log = put_until_refused(&server, 4, value_len, Arc::default(), Duration::from_secs(60)).await;
    let status =
        server.wait_exit(Duration::from_secs(10)).await.expect("the server exits after the failed write");
    assert!(!status.success(), "the server must exit with an error after a failed write: {status}");
    assert!(log.refused.iter().all(is_fail_stop), "refusals: {}", describe(&log.refused));
    assert_nothing_acked_after_the_fault(&log, None);
    let filled = started.elapsed();

    disk.resize(64);
    let server = Server::actcd(&disk.data_dir(), &[]).await;
    assert_all_acked_present(&server, &log, value_len).await;
    let mut kv = server.kv().await;
    kv.put(PutRequest { key: "after".into(), value: "restart".into(), ..Default::default() }).await.unwrap();
    eprintln!(
        "full disk: 24 MiB tmpfs filled in {:.1} s by {} acknowledged 8 KiB puts; refusals: {}; exit {status}; \
         after growing it, a restart found all {} acknowledged puts",
        filled.as_secs_f64(),
        log.acked.len(),
        describe(&log.refused),
        log.acked.len()
    );
}

/// A quota below the disk's size trips first: puts get etcd's NOSPACE error, the server stays up
/// with room left on the disk, reads go on, and the alarm and every acknowledged put survive a
/// restart.
#[tokio::test]
async fn quota_smaller_than_the_disk_refuses_puts_before_the_disk_fills() {
    let disk = Tmpfs::mount(32);
    let value_len = 8 << 10;
    let quota = (4u64 << 20).to_string();
    let flags = ["--quota-backend-bytes", quota.as_str()];
    let mut server = Server::actcd(&disk.data_dir(), &flags).await;
    let log = put_until_refused(&server, 4, value_len, Arc::default(), Duration::from_secs(60)).await;
    for refused in &log.refused {
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded")
        );
    }
    assert!(server.wait_exit(Duration::from_millis(500)).await.is_none(), "NOSPACE is no reason to exit");
    let available = disk.available_bytes();
    assert!(available > 8 << 20, "the quota let the disk fill: {available} bytes left");
    assert_all_acked_present(&server, &log, value_len).await;

    server.kill();
    let server = Server::actcd(&disk.data_dir(), &flags).await;
    assert_all_acked_present(&server, &log, value_len).await;
    let mut kv = server.kv().await;
    let again =
        kv.put(PutRequest { key: "after".into(), value: "restart".into(), ..Default::default() }).await;
    assert_eq!(
        again.unwrap_err().message(),
        "etcdserver: mvcc: database space exceeded",
        "the alarm persists"
    );
    eprintln!(
        "quota: 4 MiB quota on a 32 MiB tmpfs: {} acknowledged 8 KiB puts, then NOSPACE with {} MiB of disk left; \
         all found after a restart",
        log.acked.len(),
        available >> 20
    );
}

fn fiu_ctrl(fifo: &Path, pid: u32, commands: &[&str]) {
    let mut command = Command::new("fiu-ctrl");
    command.arg("-f").arg(fifo);
    for c in commands {
        command.args(["-c", c]);
    }
    let status = command.arg(pid.to_string()).status().expect("fiu-ctrl runs (apt-get install fiu-utils)");
    assert!(status.success(), "fiu-ctrl failed: {status}");
}

/// fsync and fdatasync start failing (libfiu, at runtime) under 4 writers: nothing started after
/// the fault is acknowledged, the server exits non-zero, and a restart (without the fault) finds
/// every acknowledged put.
#[tokio::test]
async fn fsync_error_stops_the_server_and_a_restart_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let fifo = dir.path().join("fiu-ctrl");
    let fifo_arg = fifo.to_str().unwrap();
    let mut server = Server::actcd_under(&["fiu-run", "-x", "-f", fifo_arg], &data, &[]).await;
    let value_len = 256;
    let acked = Arc::new(AtomicUsize::new(0));
    let load = {
        let acked = Arc::clone(&acked);
        let server = &server;
        async move { put_until_refused(server, 4, value_len, acked, Duration::from_secs(60)).await }
    };
    let inject = async {
        while acked.load(Ordering::SeqCst) < 500 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let pid = server.pid();
        tokio::task::spawn_blocking(move || {
            fiu_ctrl(&fifo, pid, &["enable name=posix/io/sync/fdatasync", "enable name=posix/io/sync/fsync"])
        })
        .await
        .unwrap();
        Instant::now()
    };
    let (log, injected) = tokio::join!(load, inject);
    let status =
        server.wait_exit(Duration::from_secs(10)).await.expect("the server exits after the failed fsync");
    assert!(!status.success(), "the server must exit with an error after a failed fsync: {status}");
    assert!(log.refused.iter().all(is_fail_stop), "refusals: {}", describe(&log.refused));
    assert_nothing_acked_after_the_fault(&log, Some(injected));

    let server = Server::actcd(&data, &[]).await;
    assert_all_acked_present(&server, &log, value_len).await;
    let mut kv = server.kv().await;
    kv.put(PutRequest { key: "after".into(), value: "restart".into(), ..Default::default() }).await.unwrap();
    eprintln!(
        "fsync error: {} puts acknowledged before fdatasync failed; refusals: {}; exit {status}; \
         a restart found all of them",
        log.acked.len(),
        describe(&log.refused)
    );
}
