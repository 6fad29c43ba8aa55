//! Resource exhaustion: 10k client connections, a process descriptor limit reached, and clients
//! that pipeline requests without reading the responses. (Watch streams that are never read
//! are `watch::stalled_watchers_stay_bounded_and_recover`.)
//!
//! The clients speak gRPC over the `h2` crate directly (hyper's HTTP/2, which tonic uses): one
//! small task per connection instead of a tonic channel each, and full control over reading.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures::future::join_all;
use prost::Message;

use actcd_proto::etcdserverpb::{
    DefragmentRequest, DefragmentResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
};

use crate::harness::{metric, wait_until, Server};

const RANGE: &str = "/etcdserverpb.KV/Range";
const PUT: &str = "/etcdserverpb.KV/Put";
const DEFRAGMENT: &str = "/etcdserverpb.Maintenance/Defragment";

/// One HTTP/2 connection to the server.
struct RawConn {
    send: h2::client::SendRequest<Bytes>,
    address: String,
}

async fn connect(address: &str) -> Result<RawConn, String> {
    let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (send, connection) = h2::client::handshake(tcp).await.map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(RawConn { send, address: address.to_owned() })
}

/// A gRPC message frame: not compressed, 4-byte big-endian length, the message.
fn frame(message: &impl Message) -> Bytes {
    let mut buf = BytesMut::with_capacity(5 + message.encoded_len());
    buf.put_u8(0);
    buf.put_u32(message.encoded_len() as u32);
    message.encode(&mut buf).unwrap();
    buf.freeze()
}

impl RawConn {
    /// Opens a stream and sends one request on it; the response is left to the caller.
    async fn start(
        &mut self,
        path: &str,
        message: &impl Message,
    ) -> Result<h2::client::ResponseFuture, String> {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{path}", self.address))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let mut send = self.send.clone().ready().await.map_err(|e| format!("ready: {e}"))?;
        let (response, mut body) = send.send_request(request, false).map_err(|e| format!("send: {e}"))?;
        body.send_data(frame(message), true).map_err(|e| format!("send body: {e}"))?;
        self.send = send;
        Ok(response)
    }

    /// One unary call, its response read in full.
    async fn unary<M: Message + Default>(&mut self, path: &str, message: &impl Message) -> Result<M, String> {
        let response = self.start(path, message).await?.await.map_err(|e| format!("response: {e}"))?;
        let status_in_headers = response.headers().get("grpc-status").cloned();
        let mut body = response.into_body();
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| format!("body: {e}"))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(|e| format!("trailers: {e}"))?;
        let status = trailers.and_then(|t| t.get("grpc-status").cloned()).or(status_in_headers);
        match status.as_ref().map(|s| s.as_bytes()) {
            Some(b"0") => M::decode(data.get(5..).ok_or("short body")?).map_err(|e| format!("decode: {e}")),
            other => Err(format!("grpc-status {other:?}")),
        }
    }
}

fn range(key: &str) -> RangeRequest {
    RangeRequest { key: key.to_owned().into_bytes().into(), ..Default::default() }
}

fn put(key: &str, value: Vec<u8>) -> PutRequest {
    PutRequest { key: key.to_owned().into_bytes().into(), value: value.into(), ..Default::default() }
}

/// Raises this process's soft descriptor limit to the hard one (the servers it starts inherit
/// it) and returns it.
fn raise_fd_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX).expect("the descriptor limit can be raised")
}

/// 10,000 client connections to one server, all open at once: every one is served (twice, the
/// second time while all are open); the server's resident memory per connection is reported.
#[tokio::test]
async fn ten_thousand_connections_are_all_served() {
    let connections = 10_000;
    let limit = raise_fd_limit();
    assert!(limit >= 11_000, "10k connections need a hard descriptor limit above 11000 (it is {limit})");
    let server = Server::temp_actcd(&[]).await;
    let mut first = connect(&server.address).await.unwrap();
    first.unary::<PutResponse>(PUT, &put("k", b"v".to_vec())).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.rss_bytes();

    let started = Instant::now();
    let mut open: Vec<RawConn> = Vec::with_capacity(connections);
    while open.len() < connections {
        let batch = join_all((0..100).map(|_| async {
            let mut conn = connect(&server.address).await?;
            let resp: RangeResponse = conn.unary(RANGE, &range("k")).await?;
            (resp.kvs.len() == 1).then_some(conn).ok_or_else(|| "k not found".to_owned())
        }))
        .await;
        for conn in batch {
            open.push(conn.unwrap_or_else(|e| panic!("connection {} not served: {e}", open.len())));
        }
    }
    let opened = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.rss_bytes();
    let server_fds = server.open_fds();
    assert!(
        server_fds >= connections,
        "the server holds {server_fds} descriptors for {connections} connections"
    );

    let started = Instant::now();
    let probe = range("k");
    for chunk in open.chunks_mut(250) {
        for answer in join_all(chunk.iter_mut().map(|c| c.unary::<RangeResponse>(RANGE, &probe))).await {
            assert_eq!(answer.unwrap().kvs.len(), 1);
        }
    }
    let served_again = started.elapsed();
    let per_connection = after.saturating_sub(before) / connections as u64;
    // etcd 3.4 takes ~115 KB per connection on this machine (README, watch memory).
    assert!(per_connection < 48 << 10, "{per_connection} bytes of RSS per connection");
    eprintln!(
        "10k connections: opened and served in {:.1} s, all served again in {:.1} s; server RSS {} → {} MiB, \
         {:.1} KiB per connection; {server_fds} descriptors",
        opened.as_secs_f64(),
        served_again.as_secs_f64(),
        before >> 20,
        after >> 20,
        per_connection as f64 / 1024.0
    );
}

/// Attempts one connection and one Range on it, within 5 s: a refused connection must fail
/// promptly, not hang.
async fn try_served(address: &str) -> Result<RawConn, String> {
    let attempt = async {
        let mut conn = connect(address).await?;
        conn.unary::<RangeResponse>(RANGE, &range("k")).await?;
        Ok(conn)
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
}

/// A server started under `prlimit --nofile=300` (soft and hard): connections past its budget
/// (the limit minus the descriptors it holds for storage) are refused promptly, without the
/// accept loop spinning; the admitted ones keep being served, writes and a defragment (new
/// RocksDB files) still work at the limit, and closing connections makes room for new ones.
#[tokio::test]
async fn descriptor_limit_refuses_new_connections_and_keeps_serving_the_others() {
    let nofile = 300;
    let dir = tempfile::tempdir().unwrap();
    let server =
        Server::actcd_under(&["prlimit", &format!("--nofile={nofile}"), "--"], dir.path(), &[]).await;
    let budget =
        metric(&server, "actcd_client_connections_limit").await.expect("the limit is exported") as usize;
    assert!((1..nofile).contains(&budget), "budget {budget} for {nofile} descriptors");
    // Until the server has seen the harness's readiness probe close, the probe holds a permit;
    // a scrape counts itself.
    let settled = Instant::now();
    while metric(&server, "actcd_client_connections").await != Some(1.0) {
        assert!(settled.elapsed() < Duration::from_secs(10), "earlier connections still counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut admitted = Vec::new();
    let refused = loop {
        match try_served(&server.address).await {
            Ok(conn) => admitted.push(conn),
            Err(err) => break err,
        }
        assert!(
            admitted.len() < nofile,
            "{} connections admitted under a limit of {nofile} descriptors",
            admitted.len()
        );
    };
    // The last scrape may still hold its permit for a moment; otherwise the budget is all ours.
    assert!(
        (budget - 1..=budget).contains(&admitted.len()),
        "refused at {} connections of {budget}: {refused}",
        admitted.len()
    );

    // At the limit, a stream of new connections is refused while the server idles.
    let cpu_before = server.cpu_time();
    let window = Instant::now();
    let mut refusals = 0;
    while window.elapsed() < Duration::from_secs(2) {
        assert!(try_served(&server.address).await.is_err(), "a connection over the budget was served");
        refusals += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = server.cpu_time().saturating_sub(cpu_before);
    assert!(cpu < Duration::from_millis(500), "the server used {cpu:?} of CPU in 2 s at the limit");

    // The admitted connections are served, reads and writes, and storage still gets descriptors.
    let value = vec![7u8; 1024];
    for (i, conn) in admitted.iter_mut().enumerate() {
        conn.unary::<PutResponse>(PUT, &put(&format!("c/{i}"), value.clone())).await.unwrap();
    }
    let last = admitted.len() - 1;
    admitted[0].unary::<DefragmentResponse>(DEFRAGMENT, &DefragmentRequest {}).await.unwrap();
    let read: RangeResponse = admitted[last].unary(RANGE, &range(&format!("c/{last}"))).await.unwrap();
    assert_eq!(read.kvs[0].value, value);
    let server_fds = server.open_fds();
    assert!(server_fds < nofile, "{server_fds} descriptors open");

    // Closing connections makes room again.
    let freed = 20;
    admitted.truncate(admitted.len() - freed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused_total = metric(&server, "actcd_client_connections_refused_total").await.unwrap();
    assert!(refused_total >= refusals as f64, "{refused_total} refusals counted, {refusals} seen");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One slot fewer than freed: the scrape's own permit may not be given back yet.
    for _ in 1..freed {
        admitted.push(try_served(&server.address).await.expect("a connection is served once others closed"));
    }
    eprintln!(
        "descriptor limit: under prlimit --nofile={nofile} the server admitted {budget} connections, refused \
         {refused_total} more promptly ({refusals} in a 2 s window, server CPU {} ms in it), served all admitted ones \
         (puts, a defragment) with {server_fds} descriptors open, and admitted {} new ones once {freed} closed",
        cpu.as_millis(),
        freed - 1
    );
}

/// Clients that pipeline Range requests on many streams and never read the responses (HTTP/2
/// flow control stops the server's sends at 64 KiB per connection): the server's memory stays
/// bounded, other clients are served meanwhile, and the memory is returned when they go.
#[tokio::test]
async fn clients_that_never_read_responses_leave_memory_bounded() {
    let (clients, streams_per_client) = (4, 1000);
    let server = Server::temp_actcd(&[]).await;
    let mut writer = connect(&server.address).await.unwrap();
    for i in 0..100 {
        writer.unary::<PutResponse>(PUT, &put(&format!("p/{i:03}"), vec![b'x'; 1024])).await.unwrap();
    }
    let prefix = RangeRequest { key: "p/".into(), range_end: "p0".into(), ..Default::default() };
    let response_bytes = writer.unary::<RangeResponse>(RANGE, &prefix).await.unwrap().encoded_len();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.rss_bytes();
    let allocated = || metric(&server, "actcd_jemalloc_allocated_bytes");
    let allocated_before = allocated().await.unwrap();

    let mut conns = Vec::new();
    let mut unread = Vec::new();
    let started = Instant::now();
    for _ in 0..clients {
        let mut conn = connect(&server.address).await.unwrap();
        for _ in 0..streams_per_client {
            // A server that limits concurrent streams makes the client wait here.
            match tokio::time::timeout(Duration::from_secs(2), conn.start(RANGE, &prefix)).await {
                Ok(Ok(response)) => unread.push(response),
                Ok(Err(err)) => panic!("stream refused: {err}"),
                Err(_) => break,
            }
        }
        conns.push(conn);
    }
    let sent = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = server.rss_bytes();
    let allocated_during = allocated().await.unwrap();

    let started = Instant::now();
    let mut other = connect(&server.address).await.unwrap();
    let resp: RangeResponse = other.unary(RANGE, &prefix).await.unwrap();
    assert_eq!(resp.kvs.len(), 100);
    let other_latency = started.elapsed();

    let opened = unread.len();
    drop(unread);
    drop(conns);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let allocated_after = allocated().await.unwrap();
    let grown = during.saturating_sub(before);
    let unbounded = (opened * response_bytes) as u64;
    // 64 answers held per connection (src/range_backpressure.rs), their encoded copies, and
    // the waiting streams' state.
    let bound = (clients * 64 * response_bytes * 2) as u64 + (16 << 20);
    assert_eq!(opened, clients * streams_per_client, "the client could not open its streams");
    assert!(
        grown < bound,
        "server grew by {} MiB holding unread answers (bound {} MiB)",
        grown >> 20,
        bound >> 20
    );
    assert!(other_latency < Duration::from_secs(2), "another client waited {other_latency:?}");
    assert!(
        allocated_after < allocated_before + (8 << 20) as f64,
        "{} MiB still allocated after the clients left ({} MiB before)",
        allocated_after as u64 >> 20,
        allocated_before as u64 >> 20
    );
    eprintln!(
        "unread responses: {clients} clients opened {opened} Range streams in {:.1} s and read nothing \
         ({response_bytes} B answers, {} MiB if all were held); server RSS {} → {} MiB (+{} MiB), jemalloc \
         allocated {} → {} → {} MiB once they left; another client served in {} ms meanwhile",
        sent.as_secs_f64(),
        unbounded >> 20,
        before >> 20,
        during >> 20,
        grown >> 20,
        allocated_before as u64 >> 20,
        allocated_during as u64 >> 20,
        allocated_after as u64 >> 20,
        other_latency.as_millis()
    );
}

/// The server's descriptor limit lowered under it (`prlimit --pid`, to fewer than it holds) while
/// a client connects: accept fails with EMFILE, and the server backs off instead of retrying at
/// once (tonic's own loop does, which here burned ~0.9 s of CPU in 3 s); once the limit is back,
/// the waiting client is served.
#[tokio::test]
async fn accept_errors_back_off_and_the_waiting_client_is_served_later() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("actcd.log");
    let server = Server::actcd_logged(&dir.path().join("data"), &log, &[]).await;
    let pid = server.pid() as i32;
    let (mut soft, mut hard) = (0, 0);
    rlimit::prlimit(pid, rlimit::Resource::NOFILE, None, Some((&mut soft, &mut hard))).unwrap();
    // The lowest descriptor numbers are taken (stdio), so every new one fails.
    rlimit::prlimit(pid, rlimit::Resource::NOFILE, Some((3, hard)), None).unwrap();
    let backoffs =
        || std::fs::read_to_string(&log).unwrap_or_default().matches("cannot accept connections").count();

    let cpu_before = server.cpu_time();
    let address = server.address.clone();
    let waiting = tokio::spawn(async move {
        let mut conn = connect(&address).await?;
        tokio::time::timeout(Duration::from_secs(10), conn.unary::<RangeResponse>(RANGE, &range("k")))
            .await
            .map_err(|_| "no answer within 10 s".to_owned())?
    });
    // The client's connection is pending once the server fails to accept it; a few backoffs
    // later it is still unserved, and the failing accepts have cost little CPU.
    let failing = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "eight failed accepts backed off (5 ms doubling: about 1.3 s)",
        || async { backoffs() >= 8 },
    )
    .await;
    let (cpu, window) = (server.cpu_time().saturating_sub(cpu_before), failing.elapsed());
    assert!(!waiting.is_finished(), "the client was served while the server had no descriptor to give it");

    rlimit::prlimit(pid, rlimit::Resource::NOFILE, Some((soft, hard)), None).unwrap();
    let restored = Instant::now();
    waiting.await.unwrap().expect("the waiting client is served once descriptors are back");
    let served_after = restored.elapsed();
    assert!(
        cpu.as_secs_f64() < 0.15 * window.as_secs_f64(),
        "the server used {cpu:?} of CPU in {window:?} of failing accepts"
    );
    assert!(served_after < Duration::from_secs(3), "served {served_after:?} after the limit was restored");
    eprintln!(
        "accept errors: 2 s of EMFILE with a client waiting cost the server {} ms of CPU; the client was served \
         {} ms after the limit was restored",
        cpu.as_millis(),
        served_after.as_millis()
    );
}

/// A burst of concurrent full-keyspace reads gives its memory back once it is over: jemalloc's
/// background purge and the glibc trimmer (src/c_heap.rs). Before them, five reads of 200k
/// keys left 1476 MB resident of a 2589 MB peak for as long as the server stayed idle
/// (benches/memory-return has the figures); here a smaller keyspace, and a loose bound: within
/// 6 s (jemalloc alone purges 10 s after a free, and only while it allocates) the RSS is back
/// below the middle of idle and peak.
#[tokio::test]
async fn a_burst_of_full_reads_gives_its_memory_back() {
    let server = Server::temp_actcd(&[]).await;
    let kv = server.kv().await;
    let value = Bytes::from(vec![b'v'; 1024]);
    let writers = (0..16u32).map(|w| {
        let (mut kv, value) = (kv.clone(), value.clone());
        async move {
            for i in (w..40_000).step_by(16) {
                let put =
                    PutRequest { key: format!("k{i:08}").into(), value: value.clone(), ..Default::default() };
                kv.put(put).await.unwrap();
            }
        }
    });
    join_all(writers).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = server.rss_bytes();
    let reads = (0..5).map(|_| {
        let endpoint = server.endpoint.clone();
        async move {
            let channel = tonic::transport::Channel::from_shared(endpoint).unwrap().connect().await.unwrap();
            let mut kv = actcd_proto::etcdserverpb::kv_client::KvClient::new(channel)
                .max_decoding_message_size(usize::MAX);
            let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
            kv.range(all).await.unwrap().into_inner().kvs.len()
        }
    });
    assert!(join_all(reads).await.iter().all(|n| *n == 40_000));
    let peak = server.memory().unwrap().hwm_kb * 1024;
    let middle = idle + (peak - idle) / 2;
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut now = server.rss_bytes();
    while now > middle && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        now = server.rss_bytes();
    }
    assert!(
        now <= middle,
        "RSS {} MB 6 s after the reads: idle {} MB, peak {} MB",
        now >> 20,
        idle >> 20,
        peak >> 20
    );
}
