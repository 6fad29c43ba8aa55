//! go-grpc-prometheus's server series, as etcd exports them: started, handled (by code),
//! messages received and sent, and handling time, labelled by type, service and method. A
//! tower layer in front of every gRPC service: it sees each call's path at the start and its
//! grpc-status in the response headers (trailers-only answers) or trailers.

use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use http_body::Frame;
use metrics::{Counter, Histogram};
use tonic::body::Body;

use crate::transport::observed_body::{observed, Observer};
use crate::transport::{layer_service, Answer, Inner};
use actcd_edge::grpc_go_errors;
use actcd_proto::services::{self, Method, MethodKind};
use actcd_store::metric_names as names;

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

/// One method's series, registered once. A call records through these handles: looking five
/// label sets up in the registry on every unary call took 7-9 % of the server's CPU at 100 x
/// 1000 puts (perf, 2026-12-06).
struct Series {
    method: &'static Method,
    started: Counter,
    received: Counter,
    sent: Counter,
    /// By code, in [`CODES`] order.
    handled: [Counter; CODES.len()],
    /// Registered at the method's first answer: a histogram shows even when empty, and
    /// go-grpc-prometheus (etcd's default metrics) has none until a call ends.
    handling: OnceLock<Histogram>,
}

/// go-grpc-prometheus's labels of a method's series.
fn labels_of(m: &'static Method) -> [(&'static str, &'static str); 3] {
    [("grpc_type", m.kind.label()), ("grpc_service", m.service), ("grpc_method", m.name)]
}

impl Series {
    fn register(method: &'static Method) -> Self {
        let labels = labels_of(method);
        Self {
            method,
            started: metrics::counter!(names::GRPC_SERVER_STARTED_TOTAL, &labels),
            received: metrics::counter!(names::GRPC_SERVER_MSG_RECEIVED_TOTAL, &labels),
            sent: metrics::counter!(names::GRPC_SERVER_MSG_SENT_TOTAL, &labels),
            handled: CODES.map(|code| {
                let [kind, service, method] = labels;
                metrics::counter!(
                    names::GRPC_SERVER_HANDLED_TOTAL,
                    &[kind, service, method, ("grpc_code", code)]
                )
            }),
            handling: OnceLock::new(),
        }
    }

    fn handling(&self) -> &Histogram {
        self.handling
            .get_or_init(|| metrics::histogram!(names::GRPC_SERVER_HANDLING_SECONDS, &labels_of(self.method)))
    }
}

/// Every method's series in [`services::methods`] order, and the byte counters.
struct AllSeries {
    methods: Vec<Series>,
    sent_bytes: Counter,
    received_bytes: Counter,
}

/// Registered at the first call or at [`preinitialise`], which runs as the recorder is
/// installed: handles taken before a recorder exists would record nowhere.
static SERIES: OnceLock<AllSeries> = OnceLock::new();
/// Paths outside the protos: registered at the first such call, so that the series shows only
/// once a client sent one.
static UNKNOWN: OnceLock<Series> = OnceLock::new();

fn all_series() -> &'static AllSeries {
    SERIES.get_or_init(|| AllSeries {
        methods: services::methods().map(Series::register).collect(),
        sent_bytes: metrics::counter!(names::ETCD_NETWORK_CLIENT_GRPC_SENT_BYTES_TOTAL),
        received_bytes: metrics::counter!(names::ETCD_NETWORK_CLIENT_GRPC_RECEIVED_BYTES_TOTAL),
    })
}

/// The series of the method a request path names. Paths outside the protos share one label
/// set, so a client sending made-up paths cannot grow the series without bound.
fn series_of(path: &str) -> &'static Series {
    let all = all_series();
    services::method_of_path(path)
        .and_then(|method| all.methods.iter().find(|s| std::ptr::eq(s.method, method)))
        .unwrap_or_else(|| UNKNOWN.get_or_init(|| Series::register(&UNKNOWN_METHOD)))
}

/// A grpc-status value's index in [`CODES`].
fn code_of(value: Option<&http::HeaderValue>) -> Option<usize> {
    let code: usize = value?.to_str().ok()?.parse().ok()?;
    (code < CODES.len()).then_some(code)
}

// Codes by their index in [`CODES`].
const CANCELED: usize = 1;
const UNKNOWN_CODE: usize = 2;
const INVALID_ARGUMENT: usize = 3;

/// Sets every started and handled series to zero, as go-grpc-prometheus does at start, so
/// dashboards and alerts see a value before the first call.
pub fn preinitialise() {
    let all = all_series();
    for series in &all.methods {
        series.started.absolute(0);
        series.received.absolute(0);
        series.sent.absolute(0);
        for handled in &series.handled {
            handled.absolute(0);
        }
    }
}

/// The service the layer wraps around the gRPC router.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S> GrpcMetrics<S> {
    /// Counts the calls `inner` answers.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

/// A call in progress: its method's series and when it started.
#[derive(Clone, Copy)]
struct Call {
    series: &'static Series,
    started: Instant,
}

impl Call {
    fn kind(&self) -> MethodKind {
        self.series.method.kind
    }

    /// Counts the call as answered with `code`, an index in [`CODES`].
    fn finish(&self, code: usize) {
        self.series.handled[code].increment(1);
        self.series.handling().record(self.started.elapsed().as_secs_f64());
        if code == 0 && matches!(self.kind(), MethodKind::Unary | MethodKind::ClientStream) {
            self.series.sent.increment(1);
        }
    }
}

layer_service!(GrpcMetrics.inner, Answer<S::Error>);

impl<S: Inner> GrpcMetrics<S> {
    fn answer(&mut self, request: http::Request<Body>) -> Answer<S::Error> {
        let call = Call { series: series_of(request.uri().path()), started: Instant::now() };
        call.series.started.increment(1);
        if matches!(call.kind(), MethodKind::Unary | MethodKind::ServerStream) {
            call.series.received.increment(1);
        }
        if let Some(refusal) = grpc_go_errors::refuse_content_type(&request) {
            call.finish(INVALID_ARGUMENT);
            return Box::pin(async move { Ok(refusal) });
        }
        // Cheap (shared bytes): kept to name an unknown method in its error.
        let uri = request.uri().clone();
        let request = request.map(|body| observed(body, ReceivedBytes));
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            grpc_go_errors::rewrite_answer(uri.path(), &mut response);
            // A trailers-only answer (an error, or an empty stream) carries its status here.
            if let Some(code) = code_of(response.headers().get("grpc-status")) {
                call.finish(code);
                return Ok(response);
            }
            Ok(response.map(|body| observed(body, Pending(Some(call)))))
        })
    }
}

/// A call whose status is not known yet. If its body is dropped before the trailers went out
/// (the client abandoned a stream), etcd counts the call as Canceled, and so does this.
struct Pending(Option<Call>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            call.finish(CANCELED);
        }
    }
}

/// A response reports its call's status when its trailers go out. Messages of a stream are
/// counted by DATA frames, one per message for messages up to the frame size.
impl Observer for Pending {
    fn frame(&mut self, frame: &Frame<Bytes>) {
        if let Some(trailers) = frame.trailers_ref() {
            if let Some(call) = self.0.take() {
                call.finish(code_of(trailers.get("grpc-status")).unwrap_or(UNKNOWN_CODE));
            }
        } else if let Some(data) = frame.data_ref() {
            all_series().sent_bytes.increment(data.len() as u64);
        }
        if let (Some(call), true) = (self.0.as_ref(), frame.is_data()) {
            if matches!(call.kind(), MethodKind::BidiStream | MethodKind::ServerStream) {
                call.series.sent.increment(1);
            }
        }
    }
}

/// Counts the bytes clients send (etcd's received bytes) as a request body goes by.
struct ReceivedBytes;

impl Observer for ReceivedBytes {
    fn frame(&mut self, frame: &Frame<Bytes>) {
        if let Some(data) = frame.data_ref() {
            all_series().received_bytes.increment(data.len() as u64);
        }
    }
}
