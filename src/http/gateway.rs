//! etcd's JSON gateway on the client URLs: `POST /v3/<service>/<call>` (and 3.4's `/v3beta/`
//! alias) with a JSON body is the gRPC call of that name, answered in JSON, as grpc-gateway
//! answers on etcd. The request goes to the same service a gRPC call reaches, in process, so
//! every check (auth, quota, validation) is the one gRPC gets.
//!
//! The mapping between JSON and the messages, and grpc-gateway's answers, are
//! `actcd_edge::gateway`'s; here are the paths and the calls they make. /v3/watch,
//! /v3/lease/keepalive, /v3/maintenance/snapshot and /v3/election/observe stream.

use std::sync::Arc;

use actcd_edge::gateway::errors::error;
use actcd_edge::gateway::{body_limit, decode, encode, metadata_of, method_not_allowed, not_found, streams};
use actcd_proto::etcdserverpb::auth_server::Auth;
use actcd_proto::etcdserverpb::cluster_server::Cluster;
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::lease_server::Lease;
use actcd_proto::etcdserverpb::maintenance_server::Maintenance;
use actcd_proto::v3electionpb::election_server::Election;
use actcd_proto::v3lockpb::lock_server::Lock;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use tonic::Status;

use crate::grpc::services::EtcdServices;

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
    (@service $router:ident $field:ident $($method:ident $path:literal => $kind:ident $call:ident $($learner:ident)?,)*) => {
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
    if g.services.watch.identity.is_learner() && !crate::grpc::api::learner_serves(request.uri().path()) {
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
    let limit = body_limit(g.max_request_bytes);
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
    let limit = body_limit(g.max_request_bytes);
    let requests = streams::requests::<LeaseKeepAliveRequest>(body, limit)
        .take_while(|r| futures::future::ready(r.is_ok()))
        .filter_map(|r| futures::future::ready(r.ok()));
    let metadata = metadata_of(&headers);
    let opened = g.services.lease.open_keep_alive(&metadata, &tonic::Extensions::default(), requests).await;
    streams::lines(opened.map(|s| -> tonic::codegen::BoxStream<_> { Box::pin(s) }))
}
