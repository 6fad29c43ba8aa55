//! A client URL serves gRPC and HTTP on one port, as etcd's does: each request goes to gRPC
//! when it asks for it (an `application/grpc` content type) or names a served gRPC service in
//! its path (so a malformed gRPC call still gets grpc-go's error, not a 404), and to the HTTP
//! routes otherwise (/livez, /readyz, /health, /version, /metrics; the JSON gateway's paths
//! once it exists). Unlike etcd 3.4's cmux, which sorts whole connections by their first
//! request, this sorts each request, so a connection may carry both.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use actcd_proto::services;
use axum::Router;
use futures::future::Either;
use tonic::body::Body;
use tower::Service;

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

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> Service<http::Request<Body>> for ClientHttp<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    // gRPC's future as it is: no allocation added to every call; only HTTP answers are boxed.
    type Future = Either<S::Future, BoxFuture<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.grpc.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
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
