//! KV.RangeStream (etcd 3.7, docs/etcd-rangestream.md) against unary Range on the same server
//! (there is no etcd 3.7 here): merged, the chunks are Range's answer for the same request;
//! each non-final chunk carries keys alone and the final one the header, `more` and `count`;
//! chunks grow toward --max-request-bytes; the refusals carry etcd's codes and texts; a stream
//! reads at the revision of its first chunk, ends with etcd's compacted error when that revision
//! is compacted under it, reads no further ahead of a slow client than a few chunks, and stops
//! when the client goes away; READ on the range is checked before the first chunk and the auth
//! revision after the last.

use std::time::Duration;

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{
    request_op, CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse,
    RangeStreamResponse, RequestOp, TxnRequest,
};
use actcd_proto::key_range::prefix_end;
use prost::Message;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::harness::{auth_token, enable_auth, etcdctl, metric, Server, ROOT};

/// The size chunks aim at in these tests: small, so that a few MB of data make many chunks.
const TARGET: usize = 128 * 1024;
const KEYS: usize = 2000;
const VALUE_BYTES: usize = 1000;

/// actcd with chunks aiming at TARGET, and a paced client that has put `n` keys under `prefix`.
async fn filled(prefix: &str, n: usize) -> (Server, KvClient<Channel>) {
    let server = Server::temp_actcd(&["--max-request-bytes", &TARGET.to_string()]).await;
    let mut kv = paced(&server).await;
    fill(&mut kv, prefix, n).await;
    (server, kv)
}

/// A client whose HTTP/2 windows are small, so that a client that stops reading soon stops
/// the server's sending too (the default windows would take megabytes first). The connection's
/// window is shared by its streams: a stream left unread blocks every answer on it, so writes
/// made while a stream waits go over another connection.
async fn paced(server: &Server) -> KvClient<Channel> {
    let channel = Endpoint::from_shared(server.endpoint.clone())
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    KvClient::new(channel)
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:05}")
}

/// `n` keys `prefix00000`.. with values of `VALUE_BYTES`, a hundred puts per txn.
async fn fill(kv: &mut KvClient<Channel>, prefix: &str, n: usize) {
    for first in (0..n).step_by(100) {
        let success = (first..n.min(first + 100))
            .map(|i| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: key(prefix, i).into(),
                    value: vec![b'a' + (i % 26) as u8; VALUE_BYTES].into(),
                    ..Default::default()
                })),
            })
            .collect();
        kv.txn(TxnRequest { compare: vec![], success, failure: vec![] }).await.unwrap();
    }
}

fn prefix(p: &str) -> RangeRequest {
    RangeRequest {
        key: p.to_string().into(),
        range_end: prefix_end(p.as_bytes()).into(),
        ..Default::default()
    }
}

/// Every message of a stream, and the status it ended with if not OK. A refusal may come as
/// the call's answer or as the stream's first item: either is the stream's end.
async fn read_all(kv: &mut KvClient<Channel>, req: RangeRequest) -> (Vec<RangeResponse>, Option<Status>) {
    let mut stream = match kv.range_stream(req).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => return (Vec::new(), Some(status)),
    };
    let mut chunks = Vec::new();
    let end = drain(&mut stream, &mut chunks).await;
    (chunks, end)
}

/// Reads `stream` to its end into `chunks`: the status it ended with if not OK.
async fn drain(
    stream: &mut tonic::Streaming<RangeStreamResponse>,
    chunks: &mut Vec<RangeResponse>,
) -> Option<Status> {
    loop {
        match stream.message().await {
            Ok(Some(message)) => {
                chunks.push(message.range_response.expect("every message carries a range response"))
            }
            Ok(None) => return None,
            Err(status) => return Some(status),
        }
    }
}

/// The chunks as etcd's clients merge them (proto.Merge), after checking what each carries: a
/// non-final chunk keys alone, never none; the final one the header.
fn merge(chunks: &[RangeResponse]) -> RangeResponse {
    let (last, rest) = chunks.split_last().expect("a stream carries at least one message");
    for chunk in rest {
        assert!(
            chunk.header.is_none() && !chunk.more && chunk.count == 0,
            "a non-final chunk carries keys alone"
        );
        assert!(!chunk.kvs.is_empty(), "a non-final chunk is never empty");
    }
    assert!(last.header.is_some(), "the final chunk carries the header");
    RangeResponse {
        header: last.header,
        kvs: chunks.iter().flat_map(|c| c.kvs.iter().cloned()).collect(),
        more: last.more,
        count: last.count,
    }
}

fn keys_of(chunks: &[RangeResponse]) -> usize {
    chunks.iter().map(|c| c.kvs.len()).sum()
}

/// Merged, the chunks are unary Range's answer (header included) for every request shape the
/// stream takes; the first chunk holds 10 keys and later ones grow toward --max-request-bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_merge_into_ranges_answer() {
    let (server, mut kv) = filled("k/", KEYS).await;
    let before_changes = kv.range(prefix("k/")).await.unwrap().into_inner().header.unwrap().revision;
    // History for a read at an older revision: a rewrite and a delete.
    kv.put(PutRequest { key: key("k/", 7).into(), value: "new".into(), ..Default::default() }).await.unwrap();
    kv.delete_range(DeleteRangeRequest { key: key("k/", 8).into(), ..Default::default() }).await.unwrap();

    let all = prefix("k/");
    let cases = [
        all.clone(),
        RangeRequest { limit: 137, ..all.clone() },
        RangeRequest { limit: KEYS as i64 - 1, ..all.clone() },
        RangeRequest { limit: 5000, ..all.clone() },
        RangeRequest { limit: -1, ..all.clone() },
        RangeRequest { keys_only: true, ..all.clone() },
        RangeRequest { keys_only: true, limit: 15, ..all.clone() },
        RangeRequest { count_only: true, ..all.clone() },
        RangeRequest { count_only: true, limit: 3, ..all.clone() },
        RangeRequest { revision: before_changes, ..all.clone() },
        RangeRequest { revision: before_changes, limit: 500, ..all.clone() },
        RangeRequest { serializable: true, ..all.clone() },
        RangeRequest { sort_order: 1, sort_target: 0, ..all.clone() },
        RangeRequest { key: "k/".into(), range_end: "\0".into(), ..Default::default() },
        RangeRequest { key: key("k/", 3).into(), ..Default::default() },
        RangeRequest { key: "zzz".into(), ..Default::default() },
        RangeRequest { key: "a".into(), range_end: "b".into(), ..Default::default() },
    ];
    for req in cases {
        let want = kv.range(req.clone()).await.unwrap().into_inner();
        let (chunks, end) = read_all(&mut kv, req.clone()).await;
        assert!(end.is_none(), "{end:?} for {req:?}");
        if req.count_only {
            assert_eq!(chunks.len(), 1, "count_only is one message");
        }
        if chunks.len() > 1 {
            assert_eq!(chunks[0].kvs.len(), 10, "the first chunk holds 10 keys");
        }
        assert_eq!(merge(&chunks), want, "for {req:?}");
    }

    // The whole prefix: many chunks, grown from 10 keys to about the target, never past twice
    // it (the values are all alike, so a chunk doubles only from under half the target).
    let (chunks, _) = read_all(&mut kv, all.clone()).await;
    let sizes: Vec<usize> = chunks.iter().map(|c| c.encoded_len()).collect();
    assert!(chunks.len() > 10 && chunks.len() < KEYS / 20, "{} chunks", chunks.len());
    assert!(sizes.iter().all(|&s| s <= 2 * TARGET), "{sizes:?}");
    assert!(sizes.iter().any(|&s| s >= TARGET / 2), "{sizes:?}");

    // NONE with a target other than KEY passes etcd's check; actcd streams it in key order.
    let (chunks, end) = read_all(&mut kv, RangeRequest { sort_target: 2, ..all.clone() }).await;
    assert!(end.is_none());
    assert_eq!(merge(&chunks), kv.range(all.clone()).await.unwrap().into_inner());

    // An independent client (the etcd-client crate's get_stream) reads it alike.
    let client = server.client().await;
    let options = etcd_client::GetOptions::new().with_prefix();
    let mut stream = client.kv_client().get_stream("k/", Some(options)).await.unwrap();
    let (mut keys, mut last_count) = (0, 0);
    while let Some(chunk) = stream.message().await.unwrap() {
        keys += chunk.kvs().len();
        last_count = chunk.count();
    }
    assert_eq!((keys, last_count), (KEYS - 1, KEYS as i64 - 1));
}

/// etcd 3.7's refusals, in its order, with its codes and texts; and a revision compacted or in
/// the future before the first chunk refuses the stream before any data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_etcds_codes_and_texts() {
    let (_server, mut kv) = filled("k/", 30).await;
    let all = prefix("k/");
    let sort = (Code::Unimplemented, "RangeStream does not support custom sort orders");
    let filters = (Code::Unimplemented, "RangeStream does not support revision filters");
    let invalid_sort = (Code::InvalidArgument, "etcdserver: invalid sort option");
    let cases = [
        (
            RangeRequest { sort_order: 2, ..Default::default() },
            (Code::InvalidArgument, "etcdserver: key is not provided"),
        ),
        (RangeRequest { sort_order: 3, min_mod_revision: 1, ..all.clone() }, invalid_sort),
        (RangeRequest { sort_target: 5, ..all.clone() }, invalid_sort),
        (RangeRequest { sort_order: 2, min_mod_revision: 1, ..all.clone() }, sort),
        (RangeRequest { sort_order: 1, sort_target: 3, ..all.clone() }, sort),
        (RangeRequest { sort_order: 2, sort_target: 0, ..all.clone() }, sort),
        (RangeRequest { min_mod_revision: 1, ..all.clone() }, filters),
        (RangeRequest { max_mod_revision: 1, ..all.clone() }, filters),
        (RangeRequest { min_create_revision: 1, ..all.clone() }, filters),
        (RangeRequest { max_create_revision: 1, ..all.clone() }, filters),
        (
            RangeRequest { revision: 1000, ..all.clone() },
            (Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision"),
        ),
    ];
    for (req, (code, text)) in cases {
        let (chunks, end) = read_all(&mut kv, req.clone()).await;
        let end = end.unwrap_or_else(|| panic!("{req:?} was answered"));
        assert_eq!((end.code(), end.message()), (code, text), "for {req:?}");
        assert!(chunks.is_empty(), "refused before any data: {req:?}");
    }

    let old = kv.range(all.clone()).await.unwrap().into_inner().header.unwrap().revision;
    kv.put(PutRequest { key: "k/x".into(), ..Default::default() }).await.unwrap();
    kv.compact(CompactionRequest { revision: old + 1, physical: true }).await.unwrap();
    let (chunks, end) = read_all(&mut kv, RangeRequest { revision: old, ..all }).await;
    let end = end.expect("a compacted revision is refused");
    assert_eq!(
        (end.code(), end.message()),
        (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted")
    );
    assert!(chunks.is_empty());
}

/// A client that takes one chunk and pauses: the server reads only a few chunks ahead of it;
/// writes meanwhile are not seen (the stream reads at its first chunk's revision, which its
/// final header names); a compaction of that revision meanwhile ends the stream with etcd's
/// compacted error after the chunks already read, and no final header; a client that goes
/// away stops the reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_reads_at_its_revision_until_it_is_compacted() {
    let (server, mut kv) = filled("k/", KEYS).await;
    let mut writer = KvClient::connect(server.endpoint.clone()).await.unwrap();
    let all = prefix("k/");

    // Writes between chunks.
    let pinned = kv.range(all.clone()).await.unwrap().into_inner().header.unwrap().revision;
    let want = kv.range(all.clone()).await.unwrap().into_inner();
    let mut stream = kv.clone().range_stream(all.clone()).await.unwrap().into_inner();
    let mut chunks = vec![stream.message().await.unwrap().unwrap().range_response.unwrap()];
    // The server has read ahead as far as it will for a paused client.
    settled(&server, "etcd_mvcc_range_total").await;
    writer
        .put(PutRequest { key: key("k/", KEYS - 1).into(), value: "new".into(), ..Default::default() })
        .await
        .unwrap();
    writer
        .delete_range(DeleteRangeRequest { key: key("k/", KEYS - 2).into(), ..Default::default() })
        .await
        .unwrap();
    writer.put(PutRequest { key: key("k/", KEYS + 1).into(), ..Default::default() }).await.unwrap();
    assert!(drain(&mut stream, &mut chunks).await.is_none());
    let merged = merge(&chunks);
    assert_eq!(merged.header.unwrap().revision, pinned, "the final header names the first chunk's revision");
    assert_eq!(merged, want, "writes after the first chunk are not seen");

    // A compaction between chunks.
    let ranges = "etcd_mvcc_range_total";
    let before = metric(&server, ranges).await.unwrap();
    let mut stream = kv.clone().range_stream(all.clone()).await.unwrap().into_inner();
    let mut chunks = vec![stream.message().await.unwrap().unwrap().range_response.unwrap()];
    let read_ahead = settled(&server, ranges).await - before;
    let now = writer.put(PutRequest { key: "k/x".into(), ..Default::default() }).await.unwrap().into_inner();
    writer
        .compact(CompactionRequest { revision: now.header.unwrap().revision, physical: true })
        .await
        .unwrap();
    let end =
        drain(&mut stream, &mut chunks).await.expect("the stream ends with the compacted revision's error");
    assert_eq!(
        (end.code(), end.message()),
        (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted")
    );
    assert!(chunks.iter().all(|c| c.header.is_none()), "no final header after an error");
    assert!(keys_of(&chunks) < KEYS / 2, "{} of {KEYS} keys read before the compaction", keys_of(&chunks));
    // About 25 chunks make the prefix: a paused client kept the server a few ahead of it.
    assert!((1.0..=8.0).contains(&read_ahead), "{read_ahead} chunks read for a client that took one");

    // A client that goes away.
    let before = metric(&server, ranges).await.unwrap();
    let mut stream = kv.clone().range_stream(all.clone()).await.unwrap().into_inner();
    stream.message().await.unwrap().unwrap();
    drop(stream);
    let read = settled(&server, ranges).await - before;
    assert!(read <= 8.0, "{read} chunks read for a client that took one and left");
    // The stream's task is gone: the server answers as before.
    assert_eq!(writer.range(all).await.unwrap().into_inner().count, KEYS as i64 + 1);
}

/// READ on the whole range is checked before the first chunk: a user without it is refused with
/// etcd's text and gets nothing. An auth change while a stream is under way does not stop its
/// chunks, but after the final one the stream ends "revision of auth store is old".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_checked_before_the_first_chunk_and_after_the_last() {
    let (server, mut kv) = filled("pre/", KEYS).await;
    kv.put(PutRequest { key: "secret".into(), value: "s".into(), ..Default::default() }).await.unwrap();
    enable_auth(&server, "read", "pre/");
    let token = auth_token(&server, "alice", "apw").await;
    let as_alice = |req: RangeRequest| {
        let mut request = tonic::Request::new(req);
        request.metadata_mut().insert("token", token.parse().unwrap());
        request
    };

    let denied = [
        RangeRequest { key: "secret".into(), ..Default::default() },
        RangeRequest { key: "pre/".into(), range_end: "\0".into(), ..Default::default() },
        RangeRequest { key: "a".into(), range_end: "z".into(), count_only: true, ..Default::default() },
    ];
    for req in denied {
        let refused = match kv.range_stream(as_alice(req.clone())).await {
            Err(status) => status,
            Ok(answer) => answer.into_inner().message().await.expect_err("refused before any data"),
        };
        assert_eq!(
            (refused.code(), refused.message()),
            (Code::PermissionDenied, "etcdserver: permission denied"),
            "for {req:?}"
        );
    }
    // Without a token: refused as Range refuses it.
    let (chunks, no_token) = read_all(&mut kv, prefix("pre/")).await;
    let no_token = no_token.expect("a stream without a token is refused");
    let range = kv.range(prefix("pre/")).await.unwrap_err();
    assert_eq!((no_token.code(), no_token.message()), (range.code(), range.message()));
    assert!(chunks.is_empty());

    let mut stream = kv.range_stream(as_alice(prefix("pre/"))).await.unwrap().into_inner();
    let mut chunks = vec![stream.message().await.unwrap().unwrap().range_response.unwrap()];
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (ok, out, err) = etcdctl(&server, &[ROOT, "role", "add", "r2"], None);
    assert!(ok, "an auth change while the stream is under way: {out} {err}");
    let end =
        drain(&mut stream, &mut chunks).await.expect("the stream ends in an error after an auth change");
    assert_eq!(
        (end.code(), end.message()),
        (Code::InvalidArgument, "etcdserver: revision of auth store is old")
    );
    let merged = merge(&chunks);
    assert_eq!(
        (merged.kvs.len(), merged.count, merged.more),
        (KEYS, KEYS as i64, false),
        "every chunk came first"
    );
}

/// Series `name` once it has stopped moving (the same value over five reads 100 ms apart, so a
/// stream that still reads ahead shows), where a fixed sleep would only guess when it stops.
async fn settled(server: &Server, name: &str) -> f64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let (mut last, mut same) = (metric(server, name).await.unwrap(), 0);
    while same < 4 {
        assert!(std::time::Instant::now() < deadline, "{name} kept moving for 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = metric(server, name).await.unwrap();
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}
