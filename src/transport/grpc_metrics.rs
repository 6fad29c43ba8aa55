//! go-grpc-prometheus's server series, as etcd exports them: started, handled (by code),
//! messages received and sent, and handling time, labelled by type, service and method. A
//! tower layer in front of every gRPC service: it sees each call's path at the start and its
//! grpc-status in the response headers (trailers-only answers) or trailers.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

use crate::transport::grpc_go_errors;
use actcd_proto::services::{self, Method, MethodKind};

/// gRPC status codes by number, as go-grpc-prometheus labels them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// The labels of paths that name no method of the protos.
static UNKNOWN_METHOD: Method = Method { service: "unknown", name: "unknown", kind: MethodKind::Unary };

/// The method a request path names, for its labels. Paths outside the protos share one label
/// set, so a client sending made-up paths cannot grow the series without bound; all labels are
/// static strings, so counting a call allocates nothing. One reference, not three strings:
/// every streaming call keeps it for its whole life.
fn labels_of(path: &str) -> &'static Method {
    services::method_of_path(path).unwrap_or(&UNKNOWN_METHOD)
}

fn code_name(value: Option<&http::HeaderValue>) -> Option<&'static str> {
    let code: usize = value?.to_str().ok()?.parse().ok()?;
    CODES.get(code).copied()
}

/// Sets every started and handled series to zero, as go-grpc-prometheus does at start, so
/// dashboards and alerts see a value before the first call.
pub fn preinitialise() {
    for m in services::methods() {
        let (service, method, kind) = (m.service, m.name, m.kind.label());
        let labels = [("grpc_type", kind), ("grpc_service", service), ("grpc_method", method)];
        metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_STARTED_TOTAL, &labels).absolute(0);
        metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_MSG_RECEIVED_TOTAL, &labels).absolute(0);
        metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_MSG_SENT_TOTAL, &labels).absolute(0);
        for code in CODES {
            let labels = [
                ("grpc_type", kind),
                ("grpc_service", service),
                ("grpc_method", method),
                ("grpc_code", code),
            ];
            metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_HANDLED_TOTAL, &labels).absolute(0);
        }
    }
}

/// The layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

/// The service the layer wraps around the gRPC router.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

/// What a call is, for its labels.
#[derive(Debug, Clone, Copy)]
struct Call {
    method: &'static Method,
    started: Instant,
}

impl Call {
    fn kind(&self) -> MethodKind {
        self.method.kind
    }

    fn labels(&self) -> [(&'static str, &'static str); 3] {
        let m = self.method;
        [("grpc_type", m.kind.label()), ("grpc_service", m.service), ("grpc_method", m.name)]
    }

    fn finish(&self, code: &'static str) {
        let [kind, service, method] = self.labels();
        let labels = [kind, service, method, ("grpc_code", code)];
        metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_HANDLED_TOTAL, &labels).increment(1);
        metrics::histogram!(actcd_actors::metric_names::GRPC_SERVER_HANDLING_SECONDS, &self.labels())
            .record(self.started.elapsed().as_secs_f64());
        if code == "OK" && matches!(self.kind(), MethodKind::Unary | MethodKind::ClientStream) {
            metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_MSG_SENT_TOTAL, &self.labels())
                .increment(1);
        }
    }
}

impl<S> Service<http::Request<Body>> for GrpcMetrics<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let call = Call { method: labels_of(request.uri().path()), started: Instant::now() };
        metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_STARTED_TOTAL, &call.labels()).increment(1);
        if matches!(call.kind(), MethodKind::Unary | MethodKind::ServerStream) {
            metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_MSG_RECEIVED_TOTAL, &call.labels())
                .increment(1);
        }
        if let Some(refusal) = grpc_go_errors::refuse_content_type(&request) {
            call.finish("InvalidArgument");
            return Box::pin(async move { Ok(refusal) });
        }
        // Cheap (shared bytes): kept to name an unknown method in its error.
        let uri = request.uri().clone();
        let request = request.map(|body| Body::new(ReceivedBytes { inner: body }));
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            grpc_go_errors::rewrite_answer(uri.path(), &mut response);
            // A trailers-only answer (an error, or an empty stream) carries its status here.
            if let Some(code) = code_name(response.headers().get("grpc-status")) {
                call.finish(code);
                return Ok(response);
            }
            Ok(response.map(|body| Body::new(Counted { inner: body, call: Pending(Some(call)) })))
        })
    }
}

/// A call whose status is not known yet. If its body is dropped before the trailers went out
/// (the client abandoned a stream), etcd counts the call as Canceled, and so does this.
struct Pending(Option<Call>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            call.finish("Canceled");
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that reports its call's status when its trailers go out. Messages of a
    /// stream are counted by DATA frames, one per message for messages up to the frame size.
    struct Counted {
        #[pin]
        inner: Body,
        call: Pending,
    }
}

impl HttpBody for Counted {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(trailers) = frame.trailers_ref() {
                if let Some(call) = this.call.0.take() {
                    call.finish(code_name(trailers.get("grpc-status")).unwrap_or("Unknown"));
                }
            } else if let Some(data) = frame.data_ref() {
                metrics::counter!(actcd_actors::metric_names::ETCD_NETWORK_CLIENT_GRPC_SENT_BYTES_TOTAL)
                    .increment(data.len() as u64);
            }
            if let (Some(call), true) = (this.call.0.as_ref(), frame.is_data()) {
                if matches!(call.kind(), MethodKind::BidiStream | MethodKind::ServerStream) {
                    metrics::counter!(actcd_actors::metric_names::GRPC_SERVER_MSG_SENT_TOTAL, &call.labels())
                        .increment(1);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// A request body that counts the bytes clients send (etcd's received bytes).
    struct ReceivedBytes {
        #[pin]
        inner: Body,
    }
}

impl HttpBody for ReceivedBytes {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = self.project().inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                metrics::counter!(actcd_actors::metric_names::ETCD_NETWORK_CLIENT_GRPC_RECEIVED_BYTES_TOTAL)
                    .increment(data.len() as u64);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
