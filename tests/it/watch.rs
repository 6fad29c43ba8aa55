//! Watch: semantics through the etcd-client crate and etcdctl, the same watch script against
//! etcd 3.4 and actcd, etcd's guarantees under a concurrent load, and stalled watchers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType, GetOptions, WatchOptions};

use actcd_proto::etcdserverpb::{
    request_op, watch_create_request::FilterType, watch_request, CompactionRequest, DeleteRangeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCancelRequest, WatchCreateRequest,
    WatchProgressRequest, WatchRequest, WatchResponse,
};

use crate::harness::{on_etcd_then_actcd, Server};
use crate::watch_stream::{create, RawStream};
use crate::watch_validator;

fn put(key: &str, value: &str) -> PutRequest {
    PutRequest {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
        ..Default::default()
    }
}

fn normalize(mut r: WatchResponse) -> WatchResponse {
    crate::harness::strip_identity(&mut r.header);
    r
}

/// The same sequence of watch creates, writes, progress requests and cancels on etcd 3.4 and
/// on actcd; the responses of each watch must be identical.
#[tokio::test]
async fn watch_script_matches_etcd() {
    async fn script(server: &Server) -> BTreeMap<i64, Vec<String>> {
        let mut kv = server.kv().await;
        for (k, v) in [("a", "1"), ("b", "1"), ("a", "2")] {
            kv.put(put(k, v)).await.unwrap();
        }
        kv.delete_range(DeleteRangeRequest { key: "b".into(), ..Default::default() }).await.unwrap();
        let txn = TxnRequest {
            success: vec![
                RequestOp { request: Some(request_op::Request::RequestPut(put("c", "1"))) },
                RequestOp { request: Some(request_op::Request::RequestPut(put("d", "1"))) },
            ],
            ..Default::default()
        };
        kv.txn(txn).await.unwrap();
        kv.compact(CompactionRequest { revision: 3, physical: true }).await.unwrap();

        let mut seen = Vec::new();
        let mut created = Vec::new();
        let mut stream = RawStream::open(server, create("nothing", "", 0)).await;
        created.push(stream.first_created(&mut seen).await);
        let requests = [
            WatchCreateRequest { prev_kv: true, ..create("a", "", 2) },
            create("\0", "\0", 3),
            WatchCreateRequest { prev_kv: true, ..create("a", "", 4) },
            WatchCreateRequest { filters: vec![FilterType::Noput as i32], ..create("a", "c", 3) },
            create("z", "", 0),
            WatchCreateRequest { watch_id: 10, ..create("d", "", 0) },
            WatchCreateRequest { watch_id: 10, ..create("e", "", 0) },
            create("b", "a", 0),
            WatchCreateRequest {
                prev_kv: true,
                filters: vec![FilterType::Nodelete as i32],
                ..create("", "\0", 0)
            },
        ];
        for req in requests {
            created.push(stream.create(req, &mut seen).await);
            // Let catch-up replies arrive before the next create, on both servers alike.
            seen.extend(stream.drain(Duration::from_millis(300)).await);
        }
        for (k, v) in [("a", "3"), ("z", "1"), ("d", "2")] {
            kv.put(put(k, v)).await.unwrap();
        }
        kv.delete_range(DeleteRangeRequest { key: "a".into(), ..Default::default() }).await.unwrap();
        seen.extend(stream.drain(Duration::from_millis(300)).await);
        stream.send(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})).await;
        seen.extend(stream.drain(Duration::from_millis(300)).await);
        stream.send(watch_request::RequestUnion::CancelRequest(WatchCancelRequest { watch_id: 2 })).await;
        stream.send(watch_request::RequestUnion::CancelRequest(WatchCancelRequest { watch_id: 99 })).await;
        seen.extend(stream.drain(Duration::from_millis(300)).await);
        kv.put(put("a", "4")).await.unwrap();
        seen.extend(stream.drain(Duration::from_millis(300)).await);
        // A client that closed its side still gets events: etcd's receive loop ends quietly at
        // EOF and the call lives on.
        stream.requests = tokio::sync::mpsc::channel(1).0;
        kv.put(put("a", "5")).await.unwrap();
        let after_close = stream.drain(Duration::from_millis(300)).await;
        let values = after_close.iter().flat_map(|r| &r.events).filter_map(|e| e.kv.as_ref());
        assert!(values.map(|kv| &kv.value[..]).any(|v| v == b"5"), "no event after the half-close");
        seen.extend(after_close);

        let mut by_watch: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for (i, r) in created.into_iter().enumerate() {
            by_watch.entry(-100 - i as i64).or_default().push(format!("{:?}", normalize(r)));
        }
        for r in seen {
            by_watch.entry(r.watch_id).or_default().push(format!("{:?}", normalize(r)));
        }
        by_watch
    }
    let (expected, actual) = on_etcd_then_actcd(&[], &[], script).await;
    for (id, responses) in &expected {
        assert_eq!(actual.get(id), Some(responses), "watch {id} differs");
    }
    assert_eq!(actual.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    let total: usize = expected.values().map(Vec::len).sum();
    eprintln!(
        "watch differential: {total} responses over {} watches identical on etcd 3.4 and actcd",
        expected.len()
    );
}

#[tokio::test]
async fn etcd_client_watches_keys_prefixes_history_and_compaction() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;
    c.put("p/1", "a", None).await.unwrap();
    c.put("p/2", "b", None).await.unwrap();

    let mut stream = c
        .watch("p/", Some(WatchOptions::new().with_prefix().with_prev_key().with_start_revision(2)))
        .await
        .unwrap();
    let created = stream.message().await.unwrap().unwrap();
    assert!(created.created());
    c.put("p/1", "c", None).await.unwrap();
    c.delete("p/2", None).await.unwrap();
    let mut events = Vec::new();
    while events.len() < 4 {
        let resp =
            tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
        for e in resp.events() {
            let kv = e.kv().unwrap();
            events.push((
                e.event_type(),
                kv.key_str().unwrap().to_string(),
                kv.mod_revision(),
                e.prev_kv().map(|p| p.value().to_vec()),
            ));
        }
    }
    assert_eq!(
        events,
        [
            (EventType::Put, "p/1".to_string(), 2, None),
            (EventType::Put, "p/2".to_string(), 3, None),
            (EventType::Put, "p/1".to_string(), 4, Some(b"a".to_vec())),
            (EventType::Delete, "p/2".to_string(), 5, Some(b"b".to_vec())),
        ]
    );
    stream.request_progress().await.unwrap();
    let progress =
        tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
    assert_eq!((progress.watch_id(), progress.header().unwrap().revision()), (-1, 5));

    c.compact(4, None).await.unwrap();
    let mut old = c.watch("p/1", Some(WatchOptions::new().with_start_revision(2))).await.unwrap();
    let mut canceled = None;
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(5), old.message()).await.unwrap().unwrap().unwrap();
        if r.canceled() {
            canceled = Some(r.compact_revision());
        }
    }
    assert_eq!(canceled, Some(4));
    assert_eq!(c.get("p/1", Some(GetOptions::new())).await.unwrap().kvs()[0].value(), b"c");
}

#[tokio::test]
async fn etcdctl_watch_with_rev_prefix_prev_kv_and_progress() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;
    c.put("w/a", "1", None).await.unwrap();
    c.put("w/b", "2", None).await.unwrap();
    c.put("w/a", "3", None).await.unwrap();
    let etcdctl = |args: &[&str]| {
        Command::new(crate::harness::etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(&server.address)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let history = etcdctl(&["watch", "w/", "--prefix", "--rev", "2", "--prev-kv"]);
    let mut interactive = etcdctl(&["watch", "-i"]);
    {
        let stdin = interactive.stdin.as_mut().unwrap();
        stdin.write_all(b"watch w/a\n").unwrap();
        stdin.flush().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.put("w/a", "4", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    interactive.stdin.as_mut().unwrap().write_all(b"progress\n").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut outputs = Vec::new();
    for mut child in [history, interactive] {
        let _ = child.kill();
        outputs.push(String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned());
    }
    // --rev 2 --prev-kv: the history from revision 2, each put after the first with its prev.
    assert_eq!(outputs[0], "PUT\nw/a\n1\nPUT\nw/b\n2\nPUT\nw/a\n1\nw/a\n3\nPUT\nw/a\n3\nw/a\n4\n");
    // -i: the live put, then the progress notification.
    assert!(outputs[1].starts_with("PUT\nw/a\n4\n"), "{}", outputs[1]);
    assert!(outputs[1].contains("progress notify: 5"), "{}", outputs[1]);
}

/// etcd's watch guarantees under concurrent puts, deletes, txns and compactions: ordered,
/// unique, reliable, atomic, resumable, bookmarkable, and prev_kv equal to the previous value.
#[tokio::test]
async fn watch_guarantees_hold_under_concurrent_load() {
    let server = Server::temp_actcd(&[]).await;
    let mut seen = Vec::new();
    // Watch 0: every key from the start, with prev_kv. Watch 1: one key. Both on one stream.
    let mut stream =
        RawStream::open(&server, WatchCreateRequest { prev_kv: true, ..create("v/", "v0", 1) }).await;
    stream.first_created(&mut seen).await;
    stream.create(create("v/3", "", 1), &mut seen).await;

    let mut writers = Vec::new();
    for w in 0..4u64 {
        let mut kv = server.kv().await;
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..150u64 {
                let key = format!("v/{}", (i * 7 + w) % 12);
                let revision = match i % 5 {
                    0 => {
                        kv.delete_range(DeleteRangeRequest { key: key.clone().into(), ..Default::default() })
                            .await
                            .unwrap()
                            .into_inner()
                            .header
                            .unwrap()
                            .revision
                    }
                    1 => {
                        let other = format!("v/{}", (i * 3 + w + 1) % 12);
                        let ops = if other == key { vec![key.clone()] } else { vec![key.clone(), other] };
                        let txn = TxnRequest {
                            success: ops
                                .iter()
                                .map(|k| RequestOp {
                                    request: Some(request_op::Request::RequestPut(put(
                                        k,
                                        &format!("t{w}-{i}"),
                                    ))),
                                })
                                .collect(),
                            ..Default::default()
                        };
                        kv.txn(txn).await.unwrap().into_inner().header.unwrap().revision
                    }
                    _ => {
                        kv.put(put(&key, &format!("{w}-{i}")))
                            .await
                            .unwrap()
                            .into_inner()
                            .header
                            .unwrap()
                            .revision
                    }
                };
                acked.push(revision);
            }
            acked
        }));
    }
    let mut compactor = server.kv().await;
    let compactions = tokio::spawn(async move {
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let now = compactor
                .range(RangeRequest { key: "x".into(), ..Default::default() })
                .await
                .unwrap()
                .into_inner()
                .header
                .unwrap()
                .revision;
            let _ = compactor.compact(CompactionRequest { revision: now - 200, physical: true }).await;
        }
    });
    // Read while the load runs, as a client must: a watcher whose client stops reading falls
    // behind and, with compactions this close, may rightly be canceled.
    let load = futures::future::join(futures::future::join_all(writers), compactions);
    tokio::pin!(load);
    let results = loop {
        tokio::select! {
            done = &mut load => break done.0,
            next = stream.responses.message() => seen.push(next.unwrap().unwrap()),
        }
    };
    let mut acked = HashSet::new();
    for w in results {
        acked.extend(w.unwrap());
    }
    let last = *acked.iter().max().unwrap();

    // A third watch resumes the first one from the middle (resumable).
    // Compactions stay 200 revisions behind the head, so 50 back is still readable.
    let resume_from = last - 50;
    stream.create(create("v/", "v0", resume_from), &mut seen).await;
    seen.extend(stream.drain(Duration::from_millis(500)).await);
    stream.send(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})).await;
    seen.extend(stream.drain(Duration::from_millis(500)).await);

    let received = watch_validator::by_watch(&seen);
    let progress: Vec<(usize, i64)> = seen
        .iter()
        .enumerate()
        .filter(|(_, r)| r.watch_id == -1)
        .map(|(i, r)| (i, r.header.as_ref().unwrap().revision))
        .collect();
    let all = &received[&0];
    assert!(!all.compacted, "a synced watcher must keep up, not be compacted away");
    all.check_ordered_unique().unwrap();
    // Reliable: every acknowledged revision that changed something is there. Deletes of
    // absent keys do not create a revision: they report the current one, which another write
    // made; so every acked revision is some event's revision.
    all.check_reliable(acked.iter().copied().filter(|r| *r > 1)).unwrap();
    all.check_atomic().unwrap();
    all.check_prev_kv().unwrap();
    let key_and_revision = |r: &watch_validator::Received| {
        r.events.iter().map(|(_, e)| e.kv.clone().unwrap()).collect::<Vec<_>>()
    };
    // The single-key watch saw exactly that key's events.
    let one: Vec<_> = key_and_revision(all).into_iter().filter(|kv| kv.key == "v/3").collect();
    assert_eq!(key_and_revision(&received[&1]), one);
    // Resumable: the resumed watch saw the same events from its start revision on.
    let tail: Vec<_> =
        key_and_revision(all).into_iter().filter(|kv| kv.mod_revision >= resume_from).collect();
    assert_eq!(key_and_revision(&received[&2]), tail);
    // Bookmarkable: the progress revision covers every event before it and none after.
    assert_eq!(progress.len(), 1, "one progress response");
    let (at, rev) = progress[0];
    assert_eq!(rev, last);
    watch_validator::check_bookmark(&seen, at, rev).unwrap();
    let revisions = all.revisions().len();
    eprintln!("watch guarantees: {} events, {} revisions, checked", all.events.len(), revisions);
}

/// 200 watchers whose clients stop reading while writes go on: server memory stays bounded,
/// and once they read again each gets every event, in order.
#[tokio::test]
async fn stalled_watchers_stay_bounded_and_recover() {
    let server = Server::temp_actcd(&[]).await;
    let start = 2;
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut seen = Vec::new();
        let mut s = RawStream::open(&server, create("s/", "s0", start)).await;
        s.first_created(&mut seen).await;
        for _ in 1..10 {
            s.create(create("s/", "s0", start), &mut seen).await;
        }
        streams.push(s);
    }
    let before = server.rss_bytes();
    let mut kv = server.kv().await;
    let value = "x".repeat(1024);
    let writes = 2000;
    for i in 0..writes {
        kv.put(put(&format!("s/{}", i % 50), &value)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = server.rss_bytes().saturating_sub(before);
    // Undelivered: 200 watchers x 2000 events x ~1 KiB = ~400 MiB. Held: buffers only.
    assert!(grown < 150 << 20, "server grew by {} MiB with stalled watchers", grown >> 20);

    for (n, s) in streams.iter_mut().enumerate() {
        let mut next: HashMap<i64, i64> = HashMap::new();
        let mut done = 0;
        while done < 10 {
            let r = match tokio::time::timeout(Duration::from_secs(20), s.responses.message()).await {
                Ok(Ok(Some(r))) => r,
                other => panic!("stream {n}: events stopped ({other:?}); next revisions per watch: {next:?}"),
            };
            for e in &r.events {
                let rev = e.kv.as_ref().unwrap().mod_revision;
                let expect = next.entry(r.watch_id).or_insert(start);
                assert_eq!(rev, *expect, "watch {} got revision {rev}, expected {expect}", r.watch_id);
                *expect += 1;
                if rev == start + writes - 1 {
                    done += 1;
                }
            }
        }
    }
    eprintln!(
        "stalled watchers: 200 watchers, {writes} writes, server grew {} MiB while stalled",
        grown >> 20
    );
}

/// Bad input from issue 3: clients that vanish mid-stream (etcdctl watch processes killed with
/// SIGKILL, so no HTTP/2 goodbye reaches the server) leave nothing behind: the stream and
/// connection actors stop, and every watch and stream gauge goes back to where it started.
#[tokio::test]
async fn vanished_clients_leave_no_actors_or_watches_behind() {
    use crate::harness::{etcdctl_binary, metric, metrics, wait_for_metrics};
    const CLIENTS: usize = 20;
    let server = Server::temp_actcd(&[]).await;
    let gauges = [
        "actcd_actors{actor=\"stream\"}",
        "actcd_actors{actor=\"conn\"}",
        "actcd_actor_heap_bytes{actor=\"stream\"}",
        "etcd_debugging_mvcc_watcher_total",
        "etcd_debugging_mvcc_watch_stream_total",
    ];
    let before = metrics(&server, &gauges).await;
    let mut children: Vec<std::process::Child> = (0..CLIENTS)
        .map(|i| {
            std::process::Command::new(etcdctl_binary())
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &server.address, "watch", "--prefix", &format!("vanish/{i}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("etcdctl runs")
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while metric(&server, "etcd_debugging_mvcc_watcher_total").await.unwrap_or(0.0) < CLIENTS as f64 {
        assert!(tokio::time::Instant::now() < deadline, "the etcdctl watches were not all created");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let open = metrics(&server, &gauges).await;
    assert_eq!(open[0] - before[0], CLIENTS as f64, "one StreamActor per stream");
    assert_eq!(open[1] - before[1], CLIENTS as f64, "one ConnActor per connection");
    assert!(open[2] > before[2], "streams hold memory while open");
    for child in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    wait_for_metrics(&server, &gauges, &before, "left behind after the clients died").await;
    // Still serving: a new client watches and gets its event.
    let mut client = server.client().await;
    let mut stream = client.watch("vanish/after", None).await.unwrap();
    client.put("vanish/after", "v", None).await.unwrap();
    let got = loop {
        let r =
            tokio::time::timeout(Duration::from_secs(5), stream.message()).await.unwrap().unwrap().unwrap();
        if !r.events().is_empty() {
            break r;
        }
    };
    assert_eq!(got.events()[0].kv().map(|kv| kv.value()), Some(&b"v"[..]));
}

/// A client that half-closes a stream (no more requests; events still flow, as on etcd) and
/// then resets it, on a connection that stays open: nothing on the request side tells the
/// server (the requests ended cleanly), yet the stream actor stops and its watch goes, since
/// hyper drops the response stream. The connection keeps serving new streams.
#[tokio::test]
async fn a_half_closed_stream_reset_by_its_client_leaves_nothing_behind() {
    use crate::harness::{metrics, wait_for_metrics};
    use tokio_stream::wrappers::ReceiverStream;
    let server = Server::temp_actcd(&[]).await;
    let gauges = [
        "actcd_actors{actor=\"stream\"}",
        "etcd_debugging_mvcc_watcher_total",
        "etcd_debugging_mvcc_watch_stream_total",
    ];
    let before = metrics(&server, &gauges).await;
    // One connection for the whole test.
    let mut client = server.watch_client().await;
    let mut kv = server.kv().await;
    let create_request = |key: &str| WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(create(key, "", 0))),
    };
    let (requests, rx) = tokio::sync::mpsc::channel(1);
    requests.send(create_request("halfclosed")).await.unwrap();
    let mut responses = client.watch(ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(next_response(&mut responses).await.created);
    drop(requests);
    kv.put(put("halfclosed", "v")).await.unwrap();
    let event = next_response(&mut responses).await;
    assert_eq!(event.events.len(), 1, "the half-closed stream still gets events");
    // The shards publish their gauges every half second.
    let open: Vec<f64> = before.iter().map(|b| b + 1.0).collect();
    wait_for_metrics(&server, &gauges, &open, "one stream and one watch while open").await;
    drop(responses);
    wait_for_metrics(&server, &gauges, &before, "left behind after the client reset its stream").await;
    let (requests, rx) = tokio::sync::mpsc::channel(1);
    requests.send(create_request("again")).await.unwrap();
    let mut responses = client.watch(ReceiverStream::new(rx)).await.unwrap().into_inner();
    assert!(next_response(&mut responses).await.created, "the same connection serves a new stream");
}

/// etcd issue 17507, one of the two fixes (with 15220, progress ordered after the events it
/// covers: `watch_guarantees_hold_under_concurrent_load` checks that under load) for which the
/// apiserver wants 3.4.31 or 3.5.13 before it reads consistently from its watch cache: a
/// progress request on a stream whose only watch starts at an older revision and matches no
/// event is answered at once with the current revision, not only after some event arrives.
#[tokio::test]
async fn a_progress_request_is_answered_for_a_new_watch_that_gets_no_events() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;
    let old = c.put("bar", "1", None).await.unwrap().header().unwrap().revision();
    let head = c.put("bar", "2", None).await.unwrap().header().unwrap().revision();
    for start in [old, head] {
        let mut stream = RawStream::open(&server, create("foo", "", start)).await;
        let mut seen = Vec::new();
        stream.first_created(&mut seen).await;
        stream.send(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})).await;
        let progress = stream.next(Duration::from_secs(5)).await;
        let progress = progress.unwrap_or_else(|| panic!("no progress answer for a watch from {start}"));
        assert_eq!(
            (progress.watch_id, progress.events.len(), progress.header.unwrap().revision),
            (-1, 0, head),
            "a watch from {start}"
        );
        assert!(seen.is_empty(), "{seen:?}");
    }
}

async fn next_response(responses: &mut tonic::Streaming<WatchResponse>) -> WatchResponse {
    let message = responses.message();
    tokio::time::timeout(Duration::from_secs(5), message).await.unwrap().unwrap().unwrap()
}
