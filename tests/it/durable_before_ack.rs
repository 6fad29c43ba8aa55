//! Durable before acknowledged, and before visible: the store's failpoints (on in the test
//! build, set by FAILPOINTS) hold the group commit at its boundaries while a reader, a watcher
//! and the writing client look on, and a kill -9 inside the hold shows what the disk has.
//!
//! - Held in `log::before_append` (applied in memory, not written): the client gets no
//!   answer, reads keep returning the previous revision, the future revision is refused, the
//!   watcher gets no event and its progress reports the previous revision; killed there, the
//!   write is not on disk after the restart and the store is as before it.
//! - Held in `log::after_fsync` (written and fsynced, not published): still no answer and
//!   nothing to read, but killed there, the write is on disk after the restart.
//! - Held in `apply::before_notify` (answered, not yet sent to the watch tree): killed there,
//!   the answered write reaches a watcher from storage after the restart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::Code;

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{
    request_op, watch_request, HashKvRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest,
    WatchProgressRequest, WatchRequest, WatchResponse,
};

use crate::harness::{calls_in_progress, wait_until, Server};
use crate::watch_stream::{create, RawStream};

/// How long a failpoint holds each commit.
const HOLD: Duration = Duration::from_millis(1500);

/// Starts actcd with `failpoint` sleeping `HOLD` on every commit, and a client of it.
async fn actcd_holding(dir: &std::path::Path, failpoint: &str) -> (Server, KvClient<Channel>) {
    let env = format!("FAILPOINTS={failpoint}=sleep({})", HOLD.as_millis());
    let server = Server::actcd_under(&["env", &env], dir, &[]).await;
    let kv = server.kv().await;
    (server, kv)
}

/// One txn that updates `d/a` and creates `d/new{tag}`: an update and a new key in one revision.
fn txn(value: &str, tag: &str) -> TxnRequest {
    let put = |key: String| RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.to_owned().into(),
            ..Default::default()
        })),
    };
    TxnRequest { success: vec![put("d/a".into()), put(format!("d/new{tag}"))], ..Default::default() }
}

async fn read_all(kv: &mut KvClient<Channel>) -> RangeResponse {
    let all = RangeRequest { key: "d/".into(), range_end: "d0".into(), ..Default::default() };
    kv.range(all).await.unwrap().into_inner()
}

/// (revision, [(key, value)]) of a range response.
fn state(resp: &RangeResponse) -> (i64, Vec<(String, String)>) {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        resp.header.as_ref().unwrap().revision,
        resp.kvs.iter().map(|kv| (text(&kv.key), text(&kv.value))).collect(),
    )
}

fn pair(key: &str, value: &str) -> (String, String) {
    (key.to_owned(), value.to_owned())
}

/// A watch on `d/` from `start` that records every response with the time it arrived, and
/// asks for a progress report whenever told to.
async fn watch(
    server: &Server,
    start: i64,
) -> (mpsc::Sender<WatchRequest>, Arc<Mutex<Vec<(Instant, WatchResponse)>>>) {
    let (requests, mut responses) = RawStream::created(server, create("d/", "d0", start)).await;
    let seen: Arc<Mutex<Vec<(Instant, WatchResponse)>>> = Arc::default();
    let sink = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok(Some(resp)) = responses.message().await {
            sink.lock().unwrap().push((Instant::now(), resp));
        }
    });
    (requests, seen)
}

/// Waits until a call of `method` is in the server and unanswered (the hold has it), rather
/// than guessing how long it takes to get there.
async fn in_server(server: &Server, method: &str) {
    wait_until(HOLD / 2, &format!("a {method} call held in the server"), || async move {
        calls_in_progress(server, method).await >= 1.0
    })
    .await;
}

async fn hash_at(server: &Server, revision: i64) -> (u32, i64) {
    let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
    let resp = maintenance.hash_kv(HashKvRequest { revision }).await.unwrap().into_inner();
    (resp.hash, resp.compact_revision)
}

#[tokio::test]
async fn nothing_is_answered_read_or_watched_before_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut kv) = actcd_holding(dir.path(), "log::before_append").await;
    kv.put(PutRequest { key: "d/a".into(), value: "1".into(), ..Default::default() }).await.unwrap();
    let before = state(&read_all(&mut kv).await);
    let (r1, old) = (before.0, vec![pair("d/a", "1")]);
    assert_eq!(before.1, old);
    let (progress, watched) = watch(&server, r1 + 1).await;

    // One write, held before its commit, while a reader polls and the watcher is asked for
    // its progress.
    let mut writer = server.kv().await;
    let sent = Instant::now();
    let write = tokio::spawn(async move {
        let resp = writer.txn(txn("2", "")).await;
        (Instant::now(), resp.map(|r| r.into_inner().header.unwrap().revision))
    });
    let new = vec![pair("d/a", "2"), pair("d/new", "2")];
    let mut reads_held = 0;
    while !write.is_finished() {
        let resp = read_all(&mut kv).await;
        let now = Instant::now();
        let (revision, kvs) = state(&resp);
        if (revision, &kvs) == (r1, &old) {
            // The future revision is refused: the index already holds it, the reader must not.
            let ahead = RangeRequest { key: "d/a".into(), revision: r1 + 1, ..Default::default() };
            match kv.range(ahead).await {
                Err(err) => assert_eq!(err.code(), Code::OutOfRange, "{err}"),
                // The hold can end between the two reads (seen on a loaded machine); then the
                // commit came first, and the answer must come after the hold.
                Ok(resp) => assert!(
                    Instant::now() >= sent + HOLD,
                    "a read at the held revision succeeded {:?} after the write was sent: {resp:?}",
                    Instant::now() - sent
                ),
            }
            if now < sent + HOLD {
                reads_held += 1;
            }
        } else {
            assert_eq!((revision, &kvs), (r1 + 1, &new), "a read saw a partial or unknown state");
            // The server produced this answer after the commit, which the hold delays.
            assert!(now >= sent + HOLD, "the held write was readable {:?} after it was sent", now - sent);
        }
        let ask = WatchRequest {
            request_union: Some(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})),
        };
        progress.send(ask).await.unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (answered, revision) = write.await.unwrap();
    assert_eq!(revision.unwrap(), r1 + 1);
    assert!(answered >= sent + HOLD, "answered {:?} after it was sent, inside the hold", answered - sent);
    assert!(reads_held >= 5, "only {reads_held} reads during the hold");
    assert_eq!(state(&read_all(&mut kv).await), (r1 + 1, new.clone()));

    // The watcher: progress at the previous revision until the event, the event not before
    // the commit could have happened.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !watched.lock().unwrap().iter().any(|(_, r)| !r.events.is_empty()) {
        assert!(Instant::now() < deadline, "the watcher never got the committed revision");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watched = watched.lock().unwrap().clone();
    let first_event = watched.iter().position(|(_, r)| !r.events.is_empty()).unwrap();
    let (event_at, event) = &watched[first_event];
    assert!(
        *event_at >= sent + HOLD,
        "the watcher saw the held write {:?} after it was sent",
        *event_at - sent
    );
    assert_eq!(
        event.events.iter().map(|e| e.kv.as_ref().unwrap().mod_revision).collect::<Vec<_>>(),
        [r1 + 1, r1 + 1]
    );
    let progress_held: Vec<i64> =
        watched[..first_event].iter().map(|(_, r)| r.header.as_ref().unwrap().revision).collect();
    assert!(progress_held.len() >= 3, "only {} progress reports during the hold", progress_held.len());
    assert!(progress_held.iter().all(|r| *r == r1), "progress reported the held revision: {progress_held:?}");

    // Killed inside the hold: the write never reached the disk, the store is as before it.
    let hash = hash_at(&server, r1 + 1).await;
    let mut writer = server.kv().await;
    let write = tokio::spawn(async move { writer.txn(txn("3", "3")).await.map(|_| ()) });
    in_server(&server, "Txn").await;
    assert!(!write.is_finished(), "the held write was answered");
    assert_eq!(state(&read_all(&mut kv).await), (r1 + 1, new.clone()));
    server.kill();
    assert!(write.await.unwrap().is_err(), "a write killed before its commit was acknowledged");
    let server = Server::actcd(dir.path(), &[]).await;
    let mut kv = server.kv().await;
    assert_eq!(state(&read_all(&mut kv).await), (r1 + 1, new), "the store after the restart");
    assert_eq!(hash_at(&server, r1 + 1).await, hash, "HashKV changed across the restart");
    eprintln!(
        "durable before acknowledged: a write held {HOLD:?} before its commit was answered after {:?}; \
         {reads_held} reads and {} watch progress reports during the hold saw revision {r1}, never {}; \
         killed in a second hold, it was not on disk and HashKV at {} was unchanged",
        answered - sent,
        progress_held.len(),
        r1 + 1,
        r1 + 1
    );
}

#[tokio::test]
async fn a_write_is_durable_before_it_is_visible_or_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut kv) = actcd_holding(dir.path(), "log::after_fsync").await;
    let r0 = state(&read_all(&mut kv).await).0;
    let mut writer = server.kv().await;
    let write = tokio::spawn(async move { writer.txn(txn("1", "")).await.map(|_| ()) });
    in_server(&server, "Txn").await;
    assert!(!write.is_finished(), "the held write was answered");
    assert_eq!(state(&read_all(&mut kv).await), (r0, vec![]), "the held write was readable");
    server.kill();
    assert!(write.await.unwrap().is_err(), "a write killed before its answer was acknowledged");
    let server = Server::actcd(dir.path(), &[]).await;
    let mut kv = server.kv().await;
    assert_eq!(
        state(&read_all(&mut kv).await),
        (r0 + 1, vec![pair("d/a", "1"), pair("d/new", "1")]),
        "a write killed after its fsync is not on disk"
    );
    eprintln!(
        "durable before visible: killed after its fsync, before it was visible or answered, the write was \
         on disk after the restart at revision {}",
        r0 + 1
    );
}

#[tokio::test]
async fn an_answered_write_that_no_watcher_got_before_a_crash_is_watched_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut kv) = actcd_holding(dir.path(), "apply::before_notify").await;
    let r0 = state(&read_all(&mut kv).await).0;
    let (_progress, watched) = watch(&server, r0 + 1).await;
    let sent = Instant::now();
    let revision = kv.txn(txn("1", "")).await.unwrap().into_inner().header.unwrap().revision;
    let answered = sent.elapsed();
    assert!(answered < HOLD, "the answer waited for the watchers' hold ({answered:?})");
    assert_eq!(state(&read_all(&mut kv).await), (r0 + 1, vec![pair("d/a", "1"), pair("d/new", "1")]));
    assert_eq!(revision, r0 + 1);
    // The failpoint holds the watchers' notification HOLD after the commit, so a kill before
    // then leaves the answered write unwatched by construction. (A progress request cannot
    // show it any more: its answer waits for the revision the store was at, which the hold
    // keeps from the watchers.)
    assert!(sent.elapsed() < HOLD, "the hold was over before the kill: the test proves nothing");
    server.kill();
    assert!(
        watched.lock().unwrap().iter().all(|(_, r)| r.events.is_empty()),
        "the watcher got the held events"
    );

    let server = Server::actcd(dir.path(), &[]).await;
    let (_progress, watched) = watch(&server, r0 + 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while watched.lock().unwrap().iter().all(|(_, r)| r.events.is_empty()) {
        assert!(Instant::now() < deadline, "the acknowledged write was never watched after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events: Vec<(i64, Vec<u8>)> = watched
        .lock()
        .unwrap()
        .iter()
        .flat_map(|(_, r)| {
            r.events.iter().map(|e| e.kv.as_ref().unwrap()).map(|kv| (kv.mod_revision, kv.key.to_vec()))
        })
        .collect();
    assert_eq!(events, [(r0 + 1, b"d/a".to_vec()), (r0 + 1, b"d/new".to_vec())]);
    eprintln!(
        "notify after answer: answered in {answered:?} while the watchers' delivery was held; killed before \
         any watcher got it, the write was watched from storage after the restart"
    );
}

/// A compaction is a write like any other: held before its commit it is not answered and
/// readers still read the revisions it will remove (no ErrCompacted for history that is still
/// on disk); killed there, those revisions are still readable after the restart.
#[tokio::test]
async fn a_compaction_is_not_visible_before_it_is_durable() {
    use actcd_proto::etcdserverpb::CompactionRequest;
    let dir = tempfile::tempdir().unwrap();
    let (mut server, mut kv) = actcd_holding(dir.path(), "log::before_append").await;
    let put =
        |value: &str| PutRequest { key: "d/a".into(), value: value.to_owned().into(), ..Default::default() };
    let first = kv.put(put("old")).await.unwrap().into_inner().header.unwrap().revision;
    let second = kv.put(put("new")).await.unwrap().into_inner().header.unwrap().revision;
    let at_first = RangeRequest { key: "d/a".into(), revision: first, ..Default::default() };
    let mut compactor = server.kv().await;
    let compaction = tokio::spawn(async move {
        compactor.compact(CompactionRequest { revision: second, physical: false }).await.map(|_| ())
    });
    in_server(&server, "Compact").await;
    assert!(!compaction.is_finished(), "the held compaction was answered");
    let old = kv.range(at_first.clone()).await.expect("a read below a compaction not yet durable");
    assert_eq!(state(&old.into_inner()).1, vec![pair("d/a", "old")]);
    server.kill();
    assert!(compaction.await.unwrap().is_err(), "a compaction killed before its commit was acknowledged");
    let server = Server::actcd(dir.path(), &[]).await;
    let mut kv = server.kv().await;
    let old = kv.range(at_first).await.expect("the revision an unfinished compaction would remove");
    assert_eq!(state(&old.into_inner()).1, vec![pair("d/a", "old")]);
    let compacted = kv.compact(CompactionRequest { revision: second, physical: true }).await;
    assert!(compacted.is_ok(), "compacting again after the restart: {compacted:?}");
    let gone = kv.range(RangeRequest { key: "d/a".into(), revision: first, ..Default::default() }).await;
    assert_eq!(
        gone.map(|_| ()).unwrap_err().message(),
        "etcdserver: mvcc: required revision has been compacted"
    );
}
