//! The gateway's streaming calls, as grpc-gateway streams them: the request body is a sequence
//! of JSON objects (decoded as they arrive, so a client may keep its body open and send more
//! requests), and the answer a chunked body of one `{"result":{...}}` line per message; an
//! error after the first message ends it with one `{"error":{"grpc_code":N,"http_code":H,
//! "message":TEXT,"http_status":"..."}}` object.

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::codegen::BoxStream;
use tonic::Status;

use super::errors::{error, http_status};

/// The JSON objects of `body`, one after another, as the client sends them; a partial object
/// waits for the rest. More than `limit` bytes buffered without a whole object, or bytes that
/// are no JSON, end the stream with an error.
pub fn requests<T: DeserializeOwned + Send + 'static>(
    body: Body,
    limit: usize,
) -> impl Stream<Item = Result<T, Status>> + Send + Unpin {
    struct Reading {
        body: axum::body::BodyDataStream,
        buffered: Vec<u8>,
        done: bool,
    }
    let state = Reading { body: body.into_data_stream(), buffered: Vec::new(), done: false };
    Box::pin(futures::stream::unfold(state, move |mut state| async move {
        loop {
            if state.done {
                return None;
            }
            let mut objects = serde_json::Deserializer::from_slice(&state.buffered).into_iter::<T>();
            match objects.next() {
                Some(Ok(object)) => {
                    let used = objects.byte_offset();
                    state.buffered.drain(..used);
                    return Some((Ok(object), state));
                }
                Some(Err(err)) if !err.is_eof() => {
                    state.done = true;
                    return Some((Err(Status::unknown(err.to_string())), state));
                }
                _ => {}
            }
            if state.buffered.len() > limit {
                state.done = true;
                return Some((
                    Err(Status::resource_exhausted("gateway request stream: object too large")),
                    state,
                ));
            }
            match state.body.next().await {
                Some(Ok(chunk)) => state.buffered.extend_from_slice(&chunk),
                Some(Err(err)) => {
                    state.done = true;
                    return Some((Err(Status::unknown(err.to_string())), state));
                }
                None => {
                    state.done = true;
                    // Whitespace after the last object ends the stream cleanly.
                    if state.buffered.iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    return Some((Err(Status::unknown("unexpected EOF")), state));
                }
            }
        }
    }))
}

/// The answer to a streaming call: `{"result":...}` lines, then an error object if the stream
/// fails. A call refused before its first message is answered as a unary error is.
pub fn lines<T: Serialize + Send + 'static>(answer: Result<BoxStream<T>, Status>) -> Response {
    let messages = match answer {
        Ok(messages) => messages,
        Err(status) => return error(&status),
    };
    let body = messages.map(|message| {
        let line = match message {
            Ok(message) => serde_json::to_vec(&serde_json::json!({ "result": message })),
            Err(status) => serde_json::to_vec(&stream_error(&status)),
        };
        line.map(|mut line| {
            line.push(b'\n');
            Bytes::from(line)
        })
    });
    ([(header::CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response()
}

fn stream_error(status: &Status) -> serde_json::Value {
    let http = http_status(status.code());
    serde_json::json!({ "error": {
        "grpc_code": status.code() as i32,
        "http_code": http.as_u16(),
        "message": status.message(),
        "http_status": http.canonical_reason().unwrap_or_default(),
    }})
}

#[cfg(test)]
mod tests {
    use actcd_proto::etcdserverpb::watch_request::RequestUnion;
    use actcd_proto::etcdserverpb::{ResponseHeader, WatchRequest, WatchResponse};
    use axum::body::{Body, Bytes};
    use axum::http::StatusCode;
    use futures::StreamExt;
    use tonic::{Code, Status};

    use super::{lines, requests};
    use crate::gateway::tests::answer;

    /// A body that arrives in pieces of `step` bytes.
    fn body(text: &str, step: usize) -> Body {
        let pieces: Vec<Result<Bytes, std::io::Error>> =
            text.as_bytes().chunks(step).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        Body::from_stream(futures::stream::iter(pieces))
    }

    async fn read(text: &str, step: usize, limit: usize) -> Vec<Result<WatchRequest, (Code, String)>> {
        requests::<WatchRequest>(body(text, step), limit)
            .map(|r| r.map_err(|s| (s.code(), s.message().to_owned())))
            .collect()
            .await
    }

    /// Objects split anywhere arrive whole and in order; whitespace after the last ends the
    /// stream cleanly, half an object does not.
    #[tokio::test]
    async fn request_objects_arrive_whole_however_the_body_is_cut() {
        let text = r#"{"create_request":{"key":"YQ==","prev_kv":true}} {"progress_request":{}}
                      {"cancel_request":{"watch_id":"3"}}  "#;
        for step in [1, 3, 7, text.len()] {
            let got = read(text, step, 1 << 20).await;
            let kinds: Vec<_> = got
                .iter()
                .map(|r| match r.as_ref().unwrap().request_union.as_ref().unwrap() {
                    RequestUnion::CreateRequest(c) => format!("create {:?} {}", c.key, c.prev_kv),
                    RequestUnion::ProgressRequest(_) => "progress".to_owned(),
                    RequestUnion::CancelRequest(c) => format!("cancel {}", c.watch_id),
                })
                .collect();
            assert_eq!(kinds, [r#"create b"a" true"#, "progress", "cancel 3"], "in pieces of {step}");
        }
        let cut = read(r#"{"progress_request":{}} {"create_req"#, 4, 1 << 20).await;
        assert!(cut[0].is_ok());
        assert_eq!(cut[1], Err((Code::Unknown, "unexpected EOF".into())));
        assert_eq!(cut.len(), 2);
    }

    #[tokio::test]
    async fn bad_json_and_an_object_over_the_limit_end_the_requests() {
        let bad = read(r#"{"progress_request":{}} nonsense {"progress_request":{}}"#, 5, 1 << 20).await;
        assert!(bad[0].is_ok());
        assert_eq!(bad[1].as_ref().unwrap_err().0, Code::Unknown);
        assert_eq!(bad.len(), 2, "nothing after the bad bytes");
        let big = format!(r#"{{"create_request":{{"key":"{}"}}}}"#, "A".repeat(4096));
        let over = read(&big, 512, 1024).await;
        assert_eq!(over, [Err((Code::ResourceExhausted, "gateway request stream: object too large".into()))]);
    }

    /// One `{"result":...}` line a message; a failure after the first message is grpc-gateway's
    /// stream error object; a refusal before any message is the unary error.
    #[tokio::test]
    async fn answers_are_result_lines_and_a_late_error_is_an_error_line() {
        let message = |revision| WatchResponse {
            header: Some(ResponseHeader { revision, ..ResponseHeader::default() }),
            watch_id: 1,
            ..WatchResponse::default()
        };
        let items = vec![Ok(message(5)), Ok(message(6)), Err(Status::unavailable("etcdserver: no leader"))];
        let (status, content_type, body) = answer(lines(Ok(Box::pin(futures::stream::iter(items))))).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::OK, "application/json"));
        let text = String::from_utf8(body).unwrap();
        let parsed: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert!(text.ends_with('\n'));
        assert_eq!(
            parsed,
            [
                serde_json::json!({"result": {"header": {"revision": "5"}, "watch_id": "1"}}),
                serde_json::json!({"result": {"header": {"revision": "6"}, "watch_id": "1"}}),
                serde_json::json!({"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader",
                    "http_status": "Service Unavailable"}}),
            ]
        );
        let refused = lines::<WatchResponse>(Err(Status::permission_denied("etcdserver: permission denied")));
        let (status, _, body) = answer(refused).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["code"], 7);
    }
}
