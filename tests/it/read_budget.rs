//! Large reads under one budget (`--read-budget-bytes`, src/grpc/read_budget.rs): with a
//! budget smaller than one answer, concurrent full lists of every shape still all complete
//! with the right answer (they wait for each other, never deadlock, never fail); and a client
//! that stops reading its answer gives its share back after the stall timeout, so a list that
//! waited behind it completes.

use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{request_op, PutRequest, RangeRequest, RequestOp, TxnRequest};
use prost::Message;
use tonic::transport::Channel;

use crate::harness::Server;

const KEYS: usize = 3000;
const VALUE_BYTES: usize = 1000;
/// The smallest budget the flag takes: a third of one full answer here.
const BUDGET: &str = "1048576";

async fn filled(dir: &std::path::Path) -> (Server, KvClient<Channel>) {
    let server = Server::actcd(dir, &["--read-budget-bytes", BUDGET]).await;
    let mut kv = KvClient::connect(server.endpoint.clone()).await.unwrap();
    for first in (0..KEYS).step_by(100) {
        let success = (first..first + 100)
            .map(|i| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: format!("k{i:05}").into(),
                    value: vec![b'a' + (i % 26) as u8; VALUE_BYTES].into(),
                    ..Default::default()
                })),
            })
            .collect();
        kv.txn(TxnRequest { compare: vec![], success, failure: vec![] }).await.unwrap();
    }
    (server, kv)
}

fn all() -> RangeRequest {
    RangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_lists_larger_than_the_budget_all_complete() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kv) = filled(dir.path()).await;
    let shapes = [
        all(),
        all(),
        all(),
        RangeRequest { keys_only: true, ..all() },
        RangeRequest { limit: 1500, ..all() },
        RangeRequest { sort_order: 2, sort_target: 4, ..all() },
    ];
    let reads = shapes.iter().cloned().map(|req| {
        let mut kv = kv.clone();
        tokio::spawn(async move { kv.range(req).await.map(|r| r.into_inner()) })
    });
    let answers = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(reads))
        .await
        .expect("the lists finish: waiting for the budget never deadlocks");
    let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap().expect("no list fails")).collect();
    let full = &answers[0];
    assert!(full.encoded_len() > 2 << 20, "one answer is twice the budget");
    assert_eq!((full.kvs.len(), full.count, full.more), (KEYS, KEYS as i64, false));
    for (i, kv) in full.kvs.iter().enumerate() {
        assert_eq!(kv.key, format!("k{i:05}").as_bytes());
        assert_eq!(kv.value, vec![b'a' + (i % 26) as u8; VALUE_BYTES]);
    }
    assert_eq!(answers[1], *full);
    assert_eq!(answers[2], *full);
    assert!(answers[3].kvs.iter().zip(&full.kvs).all(|(k, f)| k.value.is_empty() && k.key == f.key));
    assert_eq!(answers[4].kvs[..], full.kvs[..1500]);
    assert!(answers[4].more && answers[4].count == KEYS as i64);
    let values: Vec<_> = answers[5].kvs.iter().map(|kv| kv.value[0]).collect();
    assert!(values.windows(2).all(|w| w[0] >= w[1]), "sorted by value, descending");
    assert_eq!(answers[5].kvs.len(), KEYS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_stops_reading_gives_its_share_back() {
    let dir = tempfile::tempdir().unwrap();
    let (server, mut kv) = filled(dir.path()).await;
    // A raw HTTP/2 client that opens no window: its answer is built, and never sent.
    let address = server.endpoint.trim_start_matches("http://").to_string();
    let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (client, connection) =
        h2::client::Builder::new().initial_window_size(0).handshake::<_, bytes::Bytes>(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!("http://{address}/etcdserverpb.KV/Range"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (answer, mut body) = client.send_request(request, false).unwrap();
    let encoded = all().encode_to_vec();
    let mut frame = vec![0];
    frame.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
    frame.extend_from_slice(&encoded);
    body.send_data(frame.into(), true).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), answer).await.expect("headers").unwrap();
    assert_eq!(answer.status(), 200);
    // The stalled answer holds the whole budget; this list waits for it.
    let started = Instant::now();
    let list = tokio::time::timeout(Duration::from_secs(40), kv.range(all()))
        .await
        .expect("the stalled answer gives its share back")
        .unwrap()
        .into_inner();
    assert_eq!(list.kvs.len(), KEYS);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the list waited for the stalled answer's share ({:?})",
        started.elapsed()
    );
    driver.abort();
}
