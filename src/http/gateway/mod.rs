//! etcd's JSON gateway on the client URLs: `POST /v3/<service>/<call>` (and 3.4's `/v3beta/`
//! alias) with a JSON body is the gRPC call of that name, answered in JSON, as grpc-gateway
//! answers on etcd. The request goes to the same service a gRPC call reaches, in process, so
//! every check (auth, quota, validation) is the one gRPC gets.
//!
//! ```text
//!   body  {"key":"Zm9v","limit":"5"}     proto field names, bytes base64, int64 as strings
//!         (empty body = empty request; unknown fields ignored, as grpc-gateway ignores them)
//!   ok    200 {"header":{...},"kvs":[...],"count":"1"}     zero values left out
//!   error <HTTP status of the gRPC code> {"error":TEXT,"message":TEXT,"code":N}
//!   auth  the token in the Authorization header (or a `token` header)
//! ```
//!
//! The JSON mapping is generated with the messages (actcd-proto's build.rs). /v3/watch,
//! /v3/lease/keepalive, /v3/maintenance/snapshot and /v3/election/observe stream
//! ([`streams`]).
//!
//! # Layout
//! - here: the paths, decoding a unary request, encoding its answer or error.
//! - [`errors`]: gRPC statuses as grpc-gateway's JSON errors and HTTP statuses.
//! - [`streams`]: request bodies of many objects, answers of many lines.

pub mod errors;
pub mod streams;

use std::sync::Arc;

use actcd_proto::etcdserverpb::auth_server::Auth;
use actcd_proto::etcdserverpb::cluster_server::Cluster;
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::lease_server::Lease;
use actcd_proto::etcdserverpb::maintenance_server::Maintenance;
use actcd_proto::v3electionpb::election_server::Election;
use actcd_proto::v3lockpb::lock_server::Lock;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::Status;

use errors::error;

use crate::grpc::services::EtcdServices;

/// A JSON body is about 4/3 of its protobuf size (base64 bytes, quoted numbers) plus names; a
/// body beyond this many times --max-request-bytes is refused unread, before it is decoded.
const JSON_PER_PROTO_BYTE: usize = 4;

/// What the gateway calls: the same service instances gRPC calls reach.
pub struct Gateway {
    /// The member's services.
    pub services: Arc<EtcdServices>,
    /// --max-request-bytes: a decoded request larger than this is refused as gRPC refuses it.
    pub max_request_bytes: usize,
}

type Shared = State<Arc<Gateway>>;

/// A call with one request and a stream of answers: decode, call, stream the lines.
macro_rules! server_stream {
    ($service:ident . $method:ident) => {
        post(|State(g): Shared, headers: HeaderMap, body: Body| async move {
            match decode(&headers, body, g.max_request_bytes).await {
                Ok(request) => {
                    streams::lines(g.services.$service.$method(request).await.map(|r| r.into_inner()))
                }
                Err(status) => error(&status),
            }
        })
        .fallback(method_not_allowed)
    };
}

/// One unary call: `POST` only; decode, call `$service.$method`, encode.
macro_rules! unary {
    ($service:ident . $method:ident) => {
        post(|State(g): Shared, headers: HeaderMap, body: Body| async move {
            match decode(&headers, body, g.max_request_bytes).await {
                Ok(request) => encode(g.services.$service.$method(request).await),
                Err(status) => error(&status),
            }
        })
        .fallback(method_not_allowed)
    };
}

/// One row's route: how its call goes (see `crate::grpc::api::etcd_api`).
macro_rules! route {
    (unary $service:ident . $call:ident) => {
        unary!($service.$call)
    };
    (stream $service:ident . $call:ident) => {
        server_stream!($service.$call)
    };
    (handler $service:ident . $call:ident) => {
        post($call).fallback(method_not_allowed)
    };
}

/// Writes [`calls`] from the API's table.
macro_rules! gateway_calls {
    (@service $router:ident $field:ident $($method:ident $path:literal => $kind:ident $call:ident,)*) => {
        $(let $router = $router.route($path, route!($kind $field.$call));)*
    };
    ($($service:literal $server:ident $field:ident { $($rows:tt)* })*) => {
        /// Every path of the table, relative to /v3.
        fn calls() -> Router<Arc<Gateway>> {
            let router = Router::new();
            $(gateway_calls!(@service router $field $($rows)*);)*
            router.fallback(not_found)
        }
    };
}
crate::grpc::api::etcd_api!(gateway_calls);

/// The gateway's paths under /v3 and /v3beta.
pub fn routes(gateway: Arc<Gateway>) -> Router {
    let calls = calls().layer(axum::middleware::from_fn_with_state(Arc::clone(&gateway), learner_gate));
    Router::new().nest("/v3", calls.clone()).nest("/v3beta", calls).with_state(gateway)
}

/// A learner refuses here what it refuses on gRPC (`crate::grpc::learner_gate`).
async fn learner_gate(
    State(g): Shared,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use crate::grpc::learner_gate::GATEWAY_SERVED;
    if g.services.watch.identity.is_learner() && !GATEWAY_SERVED.contains(&request.uri().path()) {
        return error(&actcd_proto::errors::EtcdError::RpcNotSupportedForLearner.status());
    }
    next.run(request).await
}

/// /v3/watch: the body's WatchRequests (create, cancel, progress) as they arrive, the
/// stream's answers as lines. As on gRPC, the end of the body is a half-close: the watches go on
/// until the client goes away. A body whose first object is no WatchRequest is refused as
/// etcd's gateway refuses it (code 2); a bad object later ends the requests, not the answers.
async fn watch(State(g): Shared, headers: HeaderMap, body: Body) -> Response {
    use actcd_proto::etcdserverpb::WatchRequest;
    use futures::StreamExt;
    let limit = g.max_request_bytes.saturating_mul(JSON_PER_PROTO_BYTE).saturating_add(64 * 1024);
    let mut requests = streams::requests::<WatchRequest>(body, limit);
    let first = match requests.next().await {
        Some(Ok(first)) => first,
        Some(Err(status)) => return error(&Status::unknown(status.message())),
        None => return error(&Status::unknown("EOF")),
    };
    let rest = requests
        .take_while(|r| futures::future::ready(r.is_ok()))
        .filter_map(|r| futures::future::ready(r.ok()));
    let requests = futures::stream::iter([first]).chain(rest);
    let metadata = metadata_of(&headers);
    streams::lines(g.services.watch.open(Box::pin(requests), &metadata, &tonic::Extensions::default()))
}

/// /v3/lease/keepalive: one renewal per LeaseKeepAliveRequest object of the body, one line per
/// renewal; the body's end ends the stream, as a gRPC client's close-send ends etcd's.
async fn keep_alive(State(g): Shared, headers: HeaderMap, body: Body) -> Response {
    use actcd_proto::etcdserverpb::LeaseKeepAliveRequest;
    use futures::StreamExt;
    let limit = g.max_request_bytes.saturating_mul(JSON_PER_PROTO_BYTE).saturating_add(64 * 1024);
    let requests = streams::requests::<LeaseKeepAliveRequest>(body, limit)
        .take_while(|r| futures::future::ready(r.is_ok()))
        .filter_map(|r| futures::future::ready(r.ok()));
    let metadata = metadata_of(&headers);
    let opened = g.services.lease.open_keep_alive(&metadata, &tonic::Extensions::default(), requests).await;
    streams::lines(opened.map(|s| -> tonic::codegen::BoxStream<_> { Box::pin(s) }))
}

/// The caller's token from the Authorization (or `token`) header, as gRPC metadata.
fn metadata_of(headers: &HeaderMap) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    for name in ["authorization", "token"] {
        if let Some(value) = headers.get(name).and_then(|v| MetadataValue::try_from(v.as_bytes()).ok()) {
            metadata.insert(name, value);
        }
    }
    metadata
}

/// The request in `body`, with the caller's token from `headers` in its metadata.
async fn decode<T>(
    headers: &HeaderMap,
    body: Body,
    max_request_bytes: usize,
) -> Result<tonic::Request<T>, Status>
where
    T: serde::de::DeserializeOwned + Default + prost::Message,
{
    let limit = max_request_bytes.saturating_mul(JSON_PER_PROTO_BYTE).saturating_add(64 * 1024);
    let body = axum::body::to_bytes(body, limit).await.map_err(|_| too_large(None, max_request_bytes))?;
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

fn encode<T: serde::Serialize>(answer: Result<tonic::Response<T>, Status>) -> Response {
    match answer.map(|r| serde_json::to_vec(r.get_ref())) {
        Ok(Ok(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Ok(Err(err)) => error(&Status::internal(err.to_string())),
        Err(status) => error(&status),
    }
}

/// grpc-gateway's answers to a path it has no call for and to a method other than POST.
async fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "Not Found\n")
}

async fn method_not_allowed() -> Response {
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
