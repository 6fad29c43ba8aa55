//! etcd's JSON gateway as grpc-gateway maps it: a request's JSON body to its message, an
//! answer's message or a status to JSON, with the HTTP statuses and texts grpc-gateway gives
//! them. The routes onto the services are actcd's (`src/http/gateway.rs`); this is the mapping
//! alone, which needs no service to test.
//!
//! ```text
//!   body  {"key":"Zm9v","limit":"5"}     proto field names, bytes base64, int64 as strings
//!         (empty body = empty request; unknown fields ignored, as grpc-gateway ignores them)
//!   ok    200 {"header":{...},"kvs":[...],"count":"1"}     zero values left out
//!   error <HTTP status of the gRPC code> {"error":TEXT,"message":TEXT,"code":N}
//!   auth  the token in the Authorization header (or a `token` header)
//! ```
//!
//! The JSON mapping of each message is generated with the messages (actcd-proto's build.rs).
//!
//! # Layout
//! - here: decoding a unary request, encoding its answer, grpc-gateway's plain-text answers.
//! - [`errors`]: gRPC statuses as grpc-gateway's JSON errors and HTTP statuses.
//! - [`streams`]: request bodies of many objects, answers of many lines.

pub mod errors;
pub mod streams;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::Status;

use self::errors::error;

/// A JSON body is about 4/3 of its protobuf size (base64 bytes, quoted numbers) plus names; a
/// body beyond this many times --max-request-bytes is refused unread, before it is decoded.
const JSON_PER_PROTO_BYTE: usize = 4;

/// The bytes of JSON read for one request (or one object of a stream) under
/// `--max-request-bytes`, before the decoded message's own size is checked.
pub fn body_limit(max_request_bytes: usize) -> usize {
    max_request_bytes.saturating_mul(JSON_PER_PROTO_BYTE).saturating_add(64 * 1024)
}

/// The caller's token from the Authorization (or `token`) header, as gRPC metadata.
pub fn metadata_of(headers: &HeaderMap) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    for name in ["authorization", "token"] {
        if let Some(value) = headers.get(name).and_then(|v| MetadataValue::try_from(v.as_bytes()).ok()) {
            metadata.insert(name, value);
        }
    }
    metadata
}

/// The request in `body`, with the caller's token from `headers` in its metadata.
pub async fn decode<T>(
    headers: &HeaderMap,
    body: Body,
    max_request_bytes: usize,
) -> Result<tonic::Request<T>, Status>
where
    T: serde::de::DeserializeOwned + Default + prost::Message,
{
    let body = axum::body::to_bytes(body, body_limit(max_request_bytes))
        .await
        .map_err(|_| too_large(None, max_request_bytes))?;
    let message: T = if body.iter().all(u8::is_ascii_whitespace) {
        T::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| Status::invalid_argument(e.to_string()))?
    };
    let size = message.encoded_len();
    if size > max_request_bytes {
        return Err(too_large(Some(size), max_request_bytes));
    }
    Ok(tonic::Request::from_parts(metadata_of(headers), tonic::Extensions::default(), message))
}

/// grpc-go's refusal of a message over the server's limit.
fn too_large(size: Option<usize>, max: usize) -> Status {
    let size = size.map_or_else(|| "more".to_string(), |s| s.to_string());
    Status::resource_exhausted(format!("grpc: received message larger than max ({size} vs. {max})"))
}

/// A unary call's answer as JSON, or its status as grpc-gateway's error.
pub fn encode<T: serde::Serialize>(answer: Result<tonic::Response<T>, Status>) -> Response {
    match answer.map(|r| serde_json::to_vec(r.get_ref())) {
        Ok(Ok(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Ok(Err(err)) => error(&Status::internal(err.to_string())),
        Err(status) => error(&status),
    }
}

/// grpc-gateway's answer to a path it has no call for.
pub async fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found\n")
}

/// grpc-gateway's answer to a method other than POST.
pub async fn method_not_allowed() -> Response {
    plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n")
}

fn plain(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        body,
    )
        .into_response()
}
