//! Malformed and hostile gRPC traffic, sent as raw HTTP/2 (the h2 crate, no gRPC library in the
//! way): undecodable protobuf, truncated messages, wrong content types, huge and bogus length
//! prefixes, bad compression flags, unknown methods. Each must get the gRPC status that etcd
//! (grpc-go) answers, and afterwards the server must still serve and its memory must not
//! have jumped.

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::{Request, StatusCode};
use tokio::net::TcpStream;

use crate::harness::Server;

/// What came back for one crafted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub http: u16,
    /// grpc-status, from the headers (trailers-only) or the trailers; `None` without one.
    pub code: Option<i32>,
    /// grpc-message, percent-decoding left alone.
    pub message: String,
    /// Bytes of response body (gRPC frames).
    pub body: usize,
    /// The stream was reset instead of answered.
    pub reset: Option<String>,
}

/// One gRPC length-prefixed frame: flag byte, big-endian length, then the body.
pub fn frame(flag: u8, declared_len: u32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_u8(flag);
    out.put_u32(declared_len);
    out.put_slice(body);
    out.freeze()
}

/// A well-formed frame around `body`.
pub fn message(body: &[u8]) -> Bytes {
    frame(0, body.len() as u32, body)
}

/// Sends one request on a fresh HTTP/2 connection: `path`, `content_type`, then `chunks` as
/// DATA frames, the last one ending the stream. Bounded by a 10 s deadline.
pub async fn send(address: &str, path: &str, content_type: &str, chunks: &[Bytes]) -> Reply {
    tokio::time::timeout(Duration::from_secs(10), send_inner(address, path, content_type, chunks))
        .await
        .unwrap_or_else(|_| panic!("{path} with {content_type}: no answer within 10 s"))
}

async fn send_inner(address: &str, path: &str, content_type: &str, chunks: &[Bytes]) -> Reply {
    let tcp = TcpStream::connect(address).await.expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut client = client.ready().await.expect("connection ready");
    let request = Request::post(format!("http://{address}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, mut stream) = client.send_request(request, false).expect("send headers");
    if chunks.is_empty() {
        let _ = stream.send_data(Bytes::new(), true);
    }
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        if stream.send_data(chunk.clone(), last).is_err() {
            break;
        }
    }
    let reply = match response.await {
        Ok(response) => read_reply(response).await,
        Err(e) => Reply { http: 0, code: None, message: String::new(), body: 0, reset: Some(e.to_string()) },
    };
    driver.abort();
    reply
}

async fn read_reply(response: http::Response<h2::RecvStream>) -> Reply {
    let (parts, mut body) = response.into_parts();
    let header =
        |map: &http::HeaderMap, name: &str| map.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut reply = Reply {
        http: parts.status.as_u16(),
        code: header(&parts.headers, "grpc-status").and_then(|c| c.parse().ok()),
        message: percent_decoded(&header(&parts.headers, "grpc-message").unwrap_or_default()),
        body: 0,
        reset: None,
    };
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(bytes) => {
                reply.body += bytes.len();
                let _ = body.flow_control().release_capacity(bytes.len());
            }
            Err(e) => {
                reply.reset = Some(e.to_string());
                return reply;
            }
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => {
            if let Some(code) = header(&trailers, "grpc-status").and_then(|c| c.parse().ok()) {
                reply.code = Some(code);
            }
            if let Some(message) = header(&trailers, "grpc-message") {
                reply.message = percent_decoded(&message);
            }
        }
        Ok(None) => {}
        Err(e) => reply.reset = Some(e.to_string()),
    }
    reply
}

/// grpc-message is percent-encoded (tonic encodes more characters than grpc-go does).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const RANGE: &str = "/etcdserverpb.KV/Range";
const GRPC: &str = "application/grpc";

/// How actcd's answer must relate to etcd's.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The same code and text.
    Same,
    /// The same code, and texts that agree up to the decoder's own detail after this prefix.
    SamePrefix(&'static str),
    /// etcd 3.4's grpc-go resets the stream; actcd answers as newer grpc-go does: HTTP 415,
    /// INVALID_ARGUMENT.
    RefusedContentType,
    /// prost checks that string fields are UTF-8 and refuses the message (INTERNAL); etcd's
    /// gogoproto does not check, so etcd goes on to answer the call.
    Utf8Checked,
}

/// The crafted requests: name, path, content type, DATA frames, expectation.
fn cases() -> Vec<(&'static str, &'static str, &'static str, Vec<Bytes>, Expect)> {
    use Expect::*;
    // RangeRequest{key: "k"}.
    let range_k: &[u8] = &[0x0a, 0x01, b'k'];
    let unmarshal = "grpc: error unmarshalling request: ";
    vec![
        ("valid range", RANGE, GRPC, vec![message(range_k)], Same),
        ("bad protobuf", RANGE, GRPC, vec![message(&[0xff, 0xff, 0xff, 0xff])], SamePrefix(unmarshal)),
        (
            "field with a truncated length",
            RANGE,
            GRPC,
            vec![message(&[0x0a, 0x7f, b'k'])],
            SamePrefix(unmarshal),
        ),
        ("truncated message", RANGE, GRPC, vec![frame(0, 100, range_k)], Same),
        ("truncated frame header", RANGE, GRPC, vec![Bytes::from_static(&[0, 0, 0])], Same),
        ("no message", RANGE, GRPC, vec![], Same),
        ("two messages on a unary call", RANGE, GRPC, vec![message(range_k), message(range_k)], Same),
        ("huge length prefix", RANGE, GRPC, vec![frame(0, u32::MAX, range_k)], Same),
        (
            "length prefix just over the limit",
            RANGE,
            GRPC,
            vec![frame(0, 2 * 1024 * 1024 + 1, range_k)],
            Same,
        ),
        ("compressed flag, no encoding", RANGE, GRPC, vec![frame(1, 3, range_k)], Same),
        ("invalid compression flag", RANGE, GRPC, vec![frame(7, 3, range_k)], Same),
        ("wrong content-type", RANGE, "text/plain", vec![message(range_k)], RefusedContentType),
        ("json content-type", RANGE, "application/json", vec![Bytes::from_static(b"{}")], RefusedContentType),
        ("grpc+proto content-type", RANGE, "application/grpc+proto", vec![message(range_k)], Same),
        ("unknown method", "/etcdserverpb.KV/Nope", GRPC, vec![message(range_k)], Same),
        ("unknown service", "/etcdserverpb.Nope/Range", GRPC, vec![message(range_k)], Same),
        ("not a method path", "/", GRPC, vec![message(range_k)], Same),
        // AuthenticateRequest{name: "\xff"}.
        (
            "invalid UTF-8 in a string",
            "/etcdserverpb.Auth/Authenticate",
            GRPC,
            vec![message(&[0x0a, 0x01, 0xff])],
            Utf8Checked,
        ),
        (
            "bad protobuf on a watch stream",
            "/etcdserverpb.Watch/Watch",
            GRPC,
            vec![message(&[0xff, 0xff])],
            SamePrefix("grpc: failed to unmarshal the received message "),
        ),
        (
            "bad protobuf on a keep-alive stream",
            "/etcdserverpb.Lease/LeaseKeepAlive",
            GRPC,
            vec![message(&[0xff, 0xff])],
            SamePrefix("grpc: failed to unmarshal the received message "),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_get_etcds_answers() {
    let etcd = Server::temp_etcd(&[]).await;
    let actcd = Server::temp_actcd(&[]).await;
    let rss_before = actcd.rss_bytes();
    let mut same = 0;
    for (name, path, content_type, chunks, expect) in cases() {
        let theirs = send(&etcd.address, path, content_type, &chunks).await;
        let ours = send(&actcd.address, path, content_type, &chunks).await;
        let context = format!("{name}:\n  etcd:  {theirs:?}\n  actcd: {ours:?}");
        match expect {
            Expect::Same => {
                assert_eq!((ours.code, &ours.message), (theirs.code, &theirs.message), "{context}");
                assert!(ours.code.is_some() && ours.reset.is_none(), "{context}");
                same += 1;
            }
            Expect::SamePrefix(prefix) => {
                assert_eq!(ours.code, theirs.code, "{context}");
                assert!(ours.message.starts_with(prefix) && theirs.message.starts_with(prefix), "{context}");
                same += 1;
            }
            Expect::RefusedContentType => {
                assert!(theirs.reset.is_some(), "{context}");
                assert_eq!(ours.http, StatusCode::UNSUPPORTED_MEDIA_TYPE.as_u16(), "{context}");
                assert_eq!(ours.code, Some(3), "{context}");
                assert_eq!(
                    ours.message,
                    format!("invalid gRPC request content-type {content_type:?}"),
                    "{context}"
                );
            }
            Expect::Utf8Checked => {
                assert_eq!(theirs.code, Some(9), "{context}");
                assert_eq!(ours.code, Some(13), "{context}");
                assert!(ours.message.starts_with("grpc: error unmarshalling request: "), "{context}");
            }
        }
    }
    // Still up and serving, and the hostile requests left nothing behind.
    let grown = serves_and_grew(&actcd, rss_before).await;
    println!(
        "hostile frames: {} cases, {same} answered as etcd 3.4 answers, RSS grew {} KiB",
        cases().len(),
        grown / 1024
    );
    assert!(grown < 16 << 20, "RSS grew {grown} bytes");
}

/// Checks that `actcd` still answers a Range: how many bytes its RSS grew since `rss_before`.
async fn serves_and_grew(actcd: &Server, rss_before: u64) -> u64 {
    let probe = actcd_proto::etcdserverpb::RangeRequest { key: "k".into(), ..Default::default() };
    actcd.kv().await.range(probe).await.expect("actcd still serves");
    actcd.rss_bytes().saturating_sub(rss_before)
}

/// Streams that announce a message just under the size limit and then send one byte of it:
/// the server must not hold memory for what was only announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announced_but_unsent_messages_take_no_memory() {
    const CONNECTIONS: usize = 2;
    const STREAMS: usize = 100;
    let actcd = Server::temp_actcd(&[]).await;
    let rss_before = actcd.rss_bytes();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held = Vec::new();
    let mut drivers = Vec::new();
    for _ in 0..CONNECTIONS {
        let tcp = TcpStream::connect(&actcd.address).await.expect("connect");
        let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut client = client;
        for _ in 0..STREAMS {
            assert!(Instant::now() < deadline, "streams not opened within 30 s");
            client = client.ready().await.expect("room for another stream");
            let request = Request::post(format!("http://{}{RANGE}", actcd.address))
                .header("content-type", GRPC)
                .header("te", "trailers")
                .body(())
                .expect("request");
            let (response, mut stream) = client.send_request(request, false).expect("send headers");
            stream.send_data(frame(0, 2 * 1024 * 1024, &[0x0a]), false).expect("send the first byte");
            held.push((response, stream));
        }
        drivers.push(driver);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = serves_and_grew(&actcd, rss_before).await;
    println!(
        "announced 2 MiB messages: {} streams on {CONNECTIONS} connections, RSS grew {} KiB",
        CONNECTIONS * STREAMS,
        grown / 1024
    );
    assert!(grown < 64 << 20, "RSS grew {grown} bytes for {} announced messages", CONNECTIONS * STREAMS);
    drop(held);
    for driver in drivers {
        driver.abort();
    }
}
