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

#[cfg(test)]
mod tests {
    use actcd_proto::etcdserverpb::{range_request, PutRequest, RangeRequest, RangeResponse, ResponseHeader};
    use actcd_proto::mvccpb::KeyValue;
    use axum::body::Body;
    use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
    use axum::response::Response;
    use prost::Message;
    use tonic::{Code, Status};

    use super::{decode, encode, method_not_allowed, not_found};

    /// An answer's HTTP status, content type and body.
    pub(super) async fn answer(response: Response) -> (StatusCode, String, Vec<u8>) {
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).map_or("", |v| v.to_str().unwrap());
        let content_type = content_type.to_owned();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, content_type, body.to_vec())
    }

    async fn decoded<T>(json: &str, max_request_bytes: usize) -> Result<T, Status>
    where
        T: serde::de::DeserializeOwned + Default + prost::Message,
    {
        decode(&HeaderMap::new(), Body::from(json.to_owned()), max_request_bytes)
            .await
            .map(|r| r.into_inner())
    }

    /// grpc-gateway's input: proto field names, bytes in base64, int64 as a string or a number,
    /// enums by name; fields it does not know are skipped.
    #[tokio::test]
    async fn a_request_reads_base64_bytes_int64_strings_and_enum_names() {
        let json = r#"{"key":"Zm9v","range_end":"Zm9w","limit":"5","revision":7,"sort_order":"DESCEND",
                       "no_such_field":{"nested":[1]}}"#;
        let range: RangeRequest = decoded(json, 1 << 20).await.unwrap();
        assert_eq!((&range.key[..], &range.range_end[..]), (&b"foo"[..], &b"fop"[..]));
        assert_eq!((range.limit, range.revision), (5, 7));
        assert_eq!(range.sort_order(), range_request::SortOrder::Descend);
        assert_eq!(decoded::<RangeRequest>(" \n", 1 << 20).await.unwrap(), RangeRequest::default());
        for bad in [r#"{"key":"#, r#"{"key":"not base64!"}"#, r#"{"limit":"five"}"#, "[]"] {
            let err = decoded::<RangeRequest>(bad, 1 << 20).await.unwrap_err();
            assert_eq!(err.code(), Code::InvalidArgument, "{bad}: {err:?}");
        }
    }

    /// The caller's token rides in the request's metadata, from either header etcd reads.
    #[tokio::test]
    async fn the_token_header_becomes_metadata() {
        for name in ["authorization", "token"] {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static("tok.123"));
            let request = decode::<RangeRequest>(&headers, Body::empty(), 1 << 20).await.unwrap();
            assert_eq!(request.metadata().get(name).unwrap(), "tok.123");
        }
    }

    /// grpc-go's words for a message over --max-request-bytes: the decoded size when the JSON
    /// was read, "more" when the JSON alone was too long to read.
    #[tokio::test]
    async fn a_request_over_the_limit_is_refused_in_grpc_gos_words() {
        let put = PutRequest { key: "k".into(), value: vec![7u8; 40].into(), ..PutRequest::default() };
        let json = serde_json::to_string(&put).unwrap();
        let err = decoded::<PutRequest>(&json, 40).await.unwrap_err();
        let size = put.encoded_len();
        assert!(size > 40);
        assert_eq!(err.code(), Code::ResourceExhausted);
        assert_eq!(err.message(), format!("grpc: received message larger than max ({size} vs. 40)"));
        assert_eq!(decoded::<PutRequest>(&json, size).await.unwrap(), put, "at the limit it passes");
        let huge = format!(r#"{{"key":"{}"}}"#, "A".repeat(200_000));
        let err = decoded::<PutRequest>(&huge, 10).await.unwrap_err();
        assert_eq!(err.message(), "grpc: received message larger than max (more vs. 10)");
    }

    /// grpc-gateway's output (jsonpb with OrigName): int64 and uint64 as strings, bytes in
    /// base64, zero values left out.
    #[tokio::test]
    async fn an_answer_writes_int64_as_strings_bytes_as_base64_and_drops_zero_values() {
        let range = RangeResponse {
            header: Some(ResponseHeader { cluster_id: 1 << 63, revision: 42, ..ResponseHeader::default() }),
            kvs: vec![KeyValue {
                key: "foo".into(),
                value: "bar".into(),
                create_revision: 2,
                mod_revision: 42,
                version: 1,
                lease: 0,
            }],
            count: 1,
            more: false,
        };
        let (status, content_type, body) = answer(encode(Ok(tonic::Response::new(range)))).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::OK, "application/json"));
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "header": {"cluster_id": "9223372036854775808", "revision": "42"},
                "kvs": [{"key": "Zm9v", "value": "YmFy", "create_revision": "2", "mod_revision": "42", "version": "1"}],
                "count": "1"
            })
        );
    }

    #[tokio::test]
    async fn a_refused_call_is_grpc_gateways_error_object() {
        let (status, content_type, body) =
            answer(encode::<RangeResponse>(Err(Status::invalid_argument("etcdserver: key is not provided"))))
                .await;
        assert_eq!((status, content_type.as_str()), (StatusCode::BAD_REQUEST, "application/json"));
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": "etcdserver: key is not provided", "message": "etcdserver: key is not provided", "code": 3})
        );
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_get_grpc_gateways_plain_text() {
        let (status, content_type, body) = answer(not_found().await).await;
        assert_eq!(
            (status, content_type.as_str(), &body[..]),
            (StatusCode::NOT_FOUND, "text/plain; charset=utf-8", &b"Not Found\n"[..])
        );
        let response = method_not_allowed().await;
        assert_eq!(response.headers().get(header::X_CONTENT_TYPE_OPTIONS).unwrap(), "nosniff");
        let (status, _, body) = answer(response).await;
        assert_eq!((status, &body[..]), (StatusCode::METHOD_NOT_ALLOWED, &b"Method Not Allowed\n"[..]));
    }
}
