//! What a learner answers: etcd's learner serves Status, serializable Range and the Snapshot
//! stream (etcd from 3.4.28), and refuses every other call with "etcdserver: rpc not supported
//! for learner" before anything in it is read (etcd's unary and stream interceptors). The gate
//! goes by the method's path; Range's serializable flag is in its body, so KV's Range checks
//! that itself. The gRPC health service, which is not etcd's API, stays open. The calls served
//! are marked in the API table (`crate::grpc::api`), whose gateway paths the JSON gateway's
//! own gate goes by: etcd's gateway is a gRPC client of its own member, so a learner's gateway
//! refuses what its gRPC refuses.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tower::Service;

use actcd_actors::identity::Identity;
use actcd_proto::errors::EtcdError;

/// Whether a learner refuses the call on `path`: the API table marks what it serves.
fn refused(path: &str) -> bool {
    !crate::grpc::api::learner_serves(path) && !path.starts_with("/grpc.health.v1.")
}

/// The service the layer wraps around the gRPC router.
#[derive(Clone)]
pub struct LearnerGate<S> {
    inner: S,
    identity: Identity,
}

impl<S> LearnerGate<S> {
    /// Gates `inner` by this member's identity (which knows whether it is a learner).
    pub fn new(inner: S, identity: Identity) -> Self {
        Self { inner, identity }
    }
}

impl<S> Service<http::Request<Body>> for LearnerGate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let grpc = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
        if grpc && self.identity.is_learner() && refused(request.uri().path()) {
            let answer = EtcdError::RpcNotSupportedForLearner.status().into_http();
            return Box::pin(async move { Ok(answer) });
        }
        Box::pin(self.inner.call(request))
    }
}
