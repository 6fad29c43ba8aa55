//! What lies between a client's TCP socket and the gRPC services: the listener and its
//! descriptor budget, the tracking of each connection's life, and the tower layers every call
//! passes through. A request goes
//!
//! ```text
//!  TcpListener ─ accept(), within the ConnectionBudget (a descriptor permit)
//!    ─▶ on a client URL, handed to the serving thread that serves the fewest connections
//!    ─▶ (on an https URL: the TLS handshake, in a task of its own)
//!    ─▶ ClientSocket (the permit; ConnInfo: the connection's id and Range slots; its drop ends
//!       the ConnActor; its reads pass AuthorityFix, which strips a scheme from etcdctl 3.4's
//!       :authority; its small writes are coalesced)
//!    ─▶ hyper, tonic ─▶ GrpcMetrics (series, grpc-go's texts) ─▶ RangeBackpressure ─▶ a service
//! ```
//!
//! Nothing here knows a service. The services (the `grpc` modules) read only what this layer
//! leaves in each request (a [`connections::ConnInfo`]) and map a failed request stream with
//! `actcd_edge::grpc_go_errors::stream_receive_error`. The pieces that need no socket are
//! `actcd_edge`'s: TLS from the flags (`actcd_edge::tls`), the `:authority` fix
//! (`actcd_edge::authority_fix`) and grpc-go's texts (`actcd_edge::grpc_go_errors`).
//!
//! # Layout
//! - [`connection_budget`]: client sockets (gRPC and metrics) within the descriptor limit, accept
//!   errors backed off; the connections each serving thread serves.
//! - [`connections`]: connection ids and the registry of connections that have a ConnActor.
//! - [`listener`]: the stream of accepted sockets (tonic's incoming, axum's listener).
//! - [`client_socket`]: one accepted socket with all its connection carries: the permit, the
//!   id, the report of its end, the `:authority` fix, its small writes of one burst sent in one
//!   syscall.
//! - [`range_backpressure`]: a bound on the Range answers a connection leaves unread.
//! - [`serving`]: the serving threads, each serving the connections handed to it, and the
//!   acceptor that hands them out.
//! - [`grpc_metrics`]: go-grpc-prometheus's server series, as the outermost tower layer.
//! - [`observed_body`]: the one body wrapper of the layers: a body with an observer beside it.

pub mod client_socket;
pub mod connection_budget;
pub mod connections;
pub mod grpc_metrics;
pub mod listener;
pub mod observed_body;
pub mod range_backpressure;
pub mod serving;

use std::future::Future;
use std::pin::Pin;

use tonic::body::Body;
use tower::Service;

/// What every layer of the client port wraps: a service of HTTP requests whose future may
/// move to another task.
pub trait Inner:
    Service<http::Request<Body>, Response = http::Response<Body>, Future: Send + 'static>
{
}

impl<S> Inner for S
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
}

/// A layer's answer to one call, boxed.
pub type Answer<E> = Pin<Box<dyn Future<Output = Result<http::Response<Body>, E>> + Send>>;

/// The tower half of a layer `$layer<S>` whose [`Inner`] service is its field `$inner`:
/// readiness is the inner service's, and a call is the layer's own `answer` (an inherent
/// method), whose future is `$future`. `S` may be bound further after `S:`.
macro_rules! layer_service {
    ($layer:ident . $inner:ident, $future:ty $(, S: $($bound:tt)+)?) => {
        impl<S> tower::Service<http::Request<tonic::body::Body>> for $layer<S>
        where
            S: $crate::transport::Inner $(+ $($bound)+)?,
        {
            type Response = http::Response<tonic::body::Body>;
            type Error = S::Error;
            type Future = $future;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                tower::Service::poll_ready(&mut self.$inner, cx)
            }

            fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
                self.answer(request)
            }
        }
    };
}
pub(crate) use layer_service;
