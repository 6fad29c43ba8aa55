//! A client URL serves gRPC and HTTP on one port, as etcd's does: each request goes to gRPC
//! when it asks for it (an `application/grpc` content type) or names a served gRPC service in
//! its path (so a malformed gRPC call still gets grpc-go's error, not a 404), and to the HTTP
//! routes otherwise (/livez, /readyz, /health, /version, /metrics; the JSON gateway's paths
//! once it exists). Unlike etcd 3.4's cmux, which sorts whole connections by their first
//! request, this sorts each request, so a connection may carry both.

use actcd_proto::services;
use axum::Router;
use futures::future::Either;
use tonic::body::Body;
use tower::Service;

use crate::transport::{layer_service, Answer, Inner};

/// The gRPC services of a client URL with the HTTP routes beside them.
#[derive(Clone)]
pub struct ClientHttp<S> {
    grpc: S,
    routes: Router,
}

impl<S> ClientHttp<S> {
    /// `routes` answer every request that is not for `grpc`.
    pub fn new(grpc: S, routes: Router) -> Self {
        Self { grpc, routes }
    }
}

/// Whether `request` is for the gRPC services.
pub fn is_grpc<B>(request: &http::Request<B>) -> bool {
    let grpc_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let service = request.uri().path().strip_prefix('/').and_then(|p| p.split('/').next()).unwrap_or("");
    grpc_type || services::service(service).is_some()
}

// gRPC's future as it is: no allocation added to every call; only HTTP answers are boxed.
layer_service!(ClientHttp.grpc, Either<S::Future, Answer<S::Error>>);

impl<S: Inner> ClientHttp<S> {
    fn answer(&mut self, request: http::Request<Body>) -> Either<S::Future, Answer<S::Error>> {
        if is_grpc(&request) {
            return Either::Left(self.grpc.call(request));
        }
        // An axum Router is always ready, so it is called without waiting for readiness.
        let answer = self.routes.clone().call(request);
        Either::Right(Box::pin(async move {
            match answer.await {
                Ok(response) => Ok(response.map(Body::new)),
                Err(never) => match never {},
            }
        }))
    }
}
