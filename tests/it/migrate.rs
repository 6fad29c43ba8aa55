//! `actcd migrate --from-etcd`: a history made on Debian's etcd 3.4 (puts, overwrites,
//! deletes, a txn, a lease with keys, a compaction), saved by `etcdctl snapshot save` and read
//! from etcd's data dir, becomes an actcd data dir; actcd started on it answers Range at every
//! revision, a watch replayed from an old revision, the lease's time-to-live and HashKV as
//! etcd does on the same history. Damaged and truncated files are refused and leave nothing.
//!
//! And the way back: `etcdctl snapshot save` against actcd writes etcd's format, which
//! `etcdctl snapshot status` reads, `etcdctl snapshot restore` takes, and etcd 3.4 serves the
//! same history from (users and their passwords too); `actcd snapshot restore` takes it too.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, LeaseTimeToLiveOptions, Permission, PutOptions,
    Txn, TxnOp, WatchOptions,
};

use crate::harness::{etcdctl, etcdctl_binary, free_port, Server};

/// Writes a history that touches every record kind etcd stores; returns the lease's id.
async fn history(c: &mut Client) -> i64 {
    for i in 0..30 {
        c.put(format!("k/{:02}", i % 12), format!("v{i}"), None).await.unwrap();
    }
    c.delete("k/0", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    let txn = Txn::new().when([Compare::version("k/11", CompareOp::Greater, 1)]).and_then([
        TxnOp::put("t/a", "1", None),
        TxnOp::put("t/b", "2", None),
        TxnOp::delete("k/11", None),
    ]);
    assert!(c.txn(txn).await.unwrap().succeeded());
    let lease = c.lease_grant(900, None).await.unwrap().id();
    for key in ["l/1", "l/2"] {
        c.put(key, "leased", Some(PutOptions::new().with_lease(lease))).await.unwrap();
    }
    c.put("k/10", "after the lease", None).await.unwrap();
    c.compact(20, None).await.unwrap();
    c.put("k/03", "after the compaction", None).await.unwrap();
    c.delete("t/a", None).await.unwrap();
    lease
}

/// What a server answers about the history: Range of everything at each revision from the
/// compaction on, the events a watch from just after the compaction replays, the lease's
/// TTL and keys, HashKV.
/// What [`answers`] read: Range at each revision, the watch's replay, the lease, HashKV.
type Answers =
    (Vec<Vec<(Vec<u8>, Vec<u8>, i64, i64, i64, i64)>>, Vec<String>, (i64, Vec<Vec<u8>>), (u32, i64));

fn assert_same_answers(got: &Answers, want: &Answers) {
    assert_eq!(got.0, want.0, "Range at every revision since the compaction");
    assert_eq!(got.1, want.1, "the watch replayed from revision 21");
    assert_eq!(got.2, want.2, "the lease's TTL and keys");
    assert_eq!(got.3, want.3, "HashKV and the compaction revision");
}

async fn answers(c: &mut Client, lease: i64) -> Answers {
    let head = c.get("", Some(GetOptions::new().with_from_key())).await.unwrap();
    let current = head.header().unwrap().revision();
    let mut ranges = Vec::new();
    for revision in 20..=current {
        let r = c.get("", Some(GetOptions::new().with_from_key().with_revision(revision))).await.unwrap();
        ranges.push(
            r.kvs()
                .iter()
                .map(|kv| {
                    let fields = (kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease());
                    (kv.key().to_vec(), kv.value().to_vec(), fields.0, fields.1, fields.2, fields.3)
                })
                .collect(),
        );
    }
    let old = c.get("k/", Some(GetOptions::new().with_prefix().with_revision(19))).await;
    assert!(old.unwrap_err().to_string().contains("required revision has been compacted"));

    let mut stream = c
        .watch("", Some(WatchOptions::new().with_from_key().with_prev_key().with_start_revision(21)))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut seen = 0;
    while seen < current {
        let r =
            tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
        for e in r.events() {
            let kv = e.kv().unwrap();
            seen = kv.mod_revision();
            let prev = e.prev_kv().map(|p| (p.mod_revision(), p.value().to_vec()));
            events.push(format!(
                "{:?} {:?} at {} prev {prev:?}",
                e.event_type(),
                kv.key_str(),
                kv.mod_revision()
            ));
        }
    }
    let ttl = c.lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys())).await.unwrap();
    // etcd lists a lease's keys from a map, in no order.
    let mut keys = ttl.keys().to_vec();
    keys.sort();
    let hash = c.hash_kv(0).await.unwrap();
    (ranges, events, (ttl.granted_ttl(), keys), (hash.hash(), hash.compact_version()))
}

fn migrate(from: &Path, to: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_actcd"))
        .args(["migrate", "--from-etcd", from.to_str().unwrap(), "--data-dir", to.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_history_moves_to_actcd_with_every_revision() {
    let (etcd_dir, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let etcd = Server::etcd(etcd_dir.path()).await;
    let mut ce = etcd.client().await;
    let lease = history(&mut ce).await;
    let on_etcd = answers(&mut ce, lease).await;
    let snap = work.path().join("snap.db");
    let (ok, out, err) = etcdctl(&etcd, &["snapshot", "save", snap.to_str().unwrap()], None);
    assert!(ok, "{out}{err}");

    let from_snapshot = work.path().join("from-snapshot");
    let (ok, out) = migrate(&snap, &from_snapshot);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("HashKV {}", on_etcd.3 .0)), "{out}");
    {
        let actcd = Server::actcd(&from_snapshot, &[]).await;
        let mut ca = actcd.client().await;
        let on_actcd = answers(&mut ca, lease).await;
        assert_same_answers(&on_actcd, &on_etcd);
        // And it goes on from there: the next write gets etcd's next revision.
        let put = ca.put("new", "on actcd", None).await.unwrap();
        let next = ce.put("new", "on etcd", None).await.unwrap();
        assert_eq!(put.header().unwrap().revision(), next.header().unwrap().revision());
    }

    // From the data dir of a stopped etcd: the same store (one write later). etcd commits its
    // backend when it stops on SIGTERM (killed, the last writes would be only in its WAL).
    let _ = Command::new("kill").args(["-TERM", &etcd.pid().to_string()]).status();
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(etcd);
    let from_dir = work.path().join("from-dir");
    let (ok, out) = migrate(etcd_dir.path(), &from_dir);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("revision {}", on_etcd.0.len() as i64 + 20)), "{out}");

    // A damaged snapshot fails its hash; a truncated file its page count; neither leaves a dir.
    let bytes = std::fs::read(&snap).unwrap();
    let mut damaged = bytes.clone();
    damaged[bytes.len() / 2] ^= 0xff;
    let truncated = bytes[..8192].to_vec();
    for (name, content, says) in [
        ("damaged.db", damaged, "integrity check failed"),
        ("truncated.db", truncated, "truncated"),
        ("empty.db", Vec::new(), "ends before its meta pages"),
    ] {
        let file = work.path().join(name);
        std::fs::write(&file, content).unwrap();
        let to = work.path().join(format!("{name}.actcd"));
        let (ok, out) = migrate(&file, &to);
        assert!(!ok && out.contains(says), "{name}: {out}");
        assert!(!to.exists(), "{name}: a data dir was left");
        assert!(
            !work.path().join(format!("{name}.actcd.migrating")).exists(),
            "{name}: the staging dir was left"
        );
    }
    let (ok, out) = migrate(&snap, &from_snapshot);
    assert!(!ok && out.contains("is not empty"), "{out}");
}

/// Users and roles, auth left disabled: root (needed to enable auth later) and alice, who
/// may read under `k/`.
async fn users(c: &mut Client) {
    c.role_add("reader").await.unwrap();
    c.role_grant_permission("reader", Permission::read("k/").with_prefix()).await.unwrap();
    c.role_add("root").await.unwrap();
    for (user, password, role) in [("alice", "alice-pw", "reader"), ("root", "root-pw", "root")] {
        c.user_add(user, password, None).await.unwrap();
        c.user_grant_role(user, role).await.unwrap();
    }
}

/// Runs Debian's etcdctl with no endpoint (`snapshot status`, `snapshot restore`).
fn etcdctl_offline(args: &[&str]) -> (bool, String) {
    let out = Command::new(etcdctl_binary()).env("ETCDCTL_API", "3").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actcd_snapshot_is_an_etcd_snapshot() {
    let (dir, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let actcd = Server::actcd(dir.path(), &[]).await;
    let mut ca = actcd.client().await;
    let lease = history(&mut ca).await;
    users(&mut ca).await;
    let on_actcd = answers(&mut ca, lease).await;
    let current = on_actcd.0.len() as i64 + 19;
    let snap = work.path().join("snap.db");
    let (ok, out, err) = etcdctl(&actcd, &["snapshot", "save", snap.to_str().unwrap()], None);
    assert!(ok, "{out}{err}");

    // etcdctl reads it as etcd's: its revision, and its hash whole.
    let (ok, status) = etcdctl_offline(&["snapshot", "status", snap.to_str().unwrap(), "-w", "json"]);
    assert!(ok, "{status}");
    let status: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    assert_eq!(status["revision"], current, "{status}");
    assert_eq!(status["totalSize"], std::fs::metadata(&snap).unwrap().len() - 32, "{status}");

    // etcdctl restores it, and etcd 3.4 serves the same history from it.
    let restored = work.path().join("etcd");
    let peer = format!("http://127.0.0.1:{}", free_port());
    let (ok, out) = etcdctl_offline(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
        "--name",
        "differential",
        "--initial-cluster",
        &format!("differential={peer}"),
        "--initial-advertise-peer-urls",
        &peer,
    ]);
    assert!(ok, "{out}");
    {
        let etcd = Server::etcd(&restored).await;
        let mut ce = etcd.client().await;
        let on_etcd = answers(&mut ce, lease).await;
        assert_same_answers(&on_etcd, &on_actcd);
        let role = ce.role_get("reader").await.unwrap();
        assert_eq!(role.permissions().len(), 1);
        assert_eq!(role.permissions()[0].key(), b"k/");
        assert_eq!(ce.user_get("alice").await.unwrap().roles(), ["reader"]);
        // The passwords' bcrypt hashes came along: with auth on, alice reads with hers.
        let (ok, _, err) = etcdctl(&etcd, &["--user", "root:root-pw", "auth", "enable"], None);
        assert!(ok, "{err}");
        let (ok, out, err) = etcdctl(&etcd, &["--user", "alice:alice-pw", "get", "k/03"], None);
        assert!(ok && out.contains("after the compaction"), "{out}{err}");
        let (ok, _, _) = etcdctl(&etcd, &["--user", "alice:wrong", "get", "k/03"], None);
        assert!(!ok, "a wrong password is refused");
    }

    // actcd restores the same file to the same history.
    let back = work.path().join("actcd");
    let out = Command::new(env!("CARGO_BIN_EXE_actcd"))
        .args(["snapshot", "restore", snap.to_str().unwrap(), "--data-dir", back.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again = Server::actcd(&back, &[]).await;
    let mut cb = again.client().await;
    let on_back = answers(&mut cb, lease).await;
    assert_eq!(on_back, on_actcd);
    assert_eq!(cb.user_get("alice").await.unwrap().roles(), ["reader"]);
}
