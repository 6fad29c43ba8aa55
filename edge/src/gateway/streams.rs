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
