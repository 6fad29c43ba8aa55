//! What a learner answers: etcd's learner serves Status, serializable Range and the Snapshot
//! stream (etcd from 3.4.28), and refuses every other call with "etcdserver: rpc not supported
//! for learner" before anything in it is read (etcd's unary and stream interceptors). The gate
//! goes by the method's path; Range's serializable flag is in its body, so KV's Range checks
//! that itself. The gRPC health service, which is not etcd's API, stays open. The calls served
//! are marked in the API table (`crate::grpc::api`), whose gateway paths the JSON gateway's
//! own gate goes by: etcd's gateway is a gRPC client of its own member, so a learner's gateway
//! refuses what its gRPC refuses.

use tonic::body::Body;

use actcd_actors::identity::Identity;
use actcd_proto::errors::EtcdError;

use crate::transport::{layer_service, Answer, Inner};

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

layer_service!(LearnerGate.inner, Answer<S::Error>);

impl<S: Inner> LearnerGate<S> {
    fn answer(&mut self, request: http::Request<Body>) -> Answer<S::Error> {
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
