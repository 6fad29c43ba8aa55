//! HTTP on the client and metrics URLs, the paths etcd serves there, so that probes and
//! scrapers written for etcd (kubeadm's, Kubernetes' liveness and readiness probes,
//! Prometheus) work unchanged. The metrics URLs serve only these; a client URL serves them
//! beside gRPC, told apart per request.
//!
//! # Layout
//! - [`probes`]: /livez and /readyz (etcd 3.6): named checks, `?verbose`, `?exclude=`, their
//!   metrics.
//! - [`health`]: /health and /version with etcd 3.4's JSON bodies.
//! - [`gateway`]: etcd's JSON gateway (`POST /v3/kv/range`, ...), client URLs only.
//! - [`state`]: what the paths answer from.
//! - [`client_port`]: the layer that hands a client URL's non-gRPC requests to [`routes`].
//! - here: the routes, /metrics, and the server on the metrics URLs.

pub mod client_port;
pub mod gateway;
pub mod health;
pub mod probes;
pub mod state;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use crate::transport::listener::SocketListener;
use probes::{Probe, Selection};

pub use state::HttpState;

/// Every HTTP path, on both kinds of URL. Anything else is Go's 404.
pub fn routes(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health::health))
        .route("/version", get(health::version))
        .route("/livez", any(|m, s, q| probe(Probe::Livez, None, m, s, q)))
        .route("/readyz", any(|m, s, q| probe(Probe::Readyz, None, m, s, q)))
        .route("/livez/{check}", any(|Path(c): Path<String>, m, s, q| probe(Probe::Livez, Some(c), m, s, q)))
        .route(
            "/readyz/{check}",
            any(|Path(c): Path<String>, m, s, q| probe(Probe::Readyz, Some(c), m, s, q)),
        )
        .fallback(not_found)
        .with_state(state)
}

/// Serves [`routes`] on a metrics URL until the listener fails.
pub async fn serve(listener: SocketListener, state: HttpState) {
    if let Err(err) = axum::serve(listener, routes(state)).await {
        tracing::error!(%err, "metrics endpoint stopped");
    }
}

/// The Prometheus text: the recorded series and those sampled now.
async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    let text = crate::metrics::prometheus::render(&state.prometheus, &state.store.view);
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// /livez, /readyz and their sub-paths. etcd's handler refuses every method but GET (HEAD too).
async fn probe(
    probe: Probe,
    check: Option<String>,
    method: Method,
    State(state): State<HttpState>,
    RawQuery(query): RawQuery,
) -> Response {
    let path = match &check {
        Some(check) => format!("/{}/{check}", probe.name()),
        None => format!("/{}", probe.name()),
    };
    let selection = match check {
        None => Selection::root(probe, query.as_deref()),
        Some(name) => match probe.check_named(&name) {
            Some(check) => Selection::one(check, query.as_deref()),
            None => return not_found().await.into_response(),
        },
    };
    if method != Method::GET {
        // etcd warns here; but the client chose the method, and the 405 tells it so.
        tracing::debug!(%path, status_code = 405, "Health request error");
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET")], text("Method Not Allowed\n"))
            .into_response();
    }
    let (status, body) = probes::answer(probe, &selection, &state.store).await;
    if status.is_success() {
        tracing::debug!(%path, status_code = status.as_u16(), "Health check OK");
    } else {
        tracing::error!(%path, reason = %body.trim_end(), status_code = status.as_u16(), "Health check error");
    }
    (status, [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")], text(body)).into_response()
}

/// A body as Go's net/http writes a plain-text one.
fn text(body: impl Into<String>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body.into())
}

/// Go's ServeMux answer to a path nobody serves.
async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, [(header::X_CONTENT_TYPE_OPTIONS, "nosniff")], text("404 page not found\n"))
}
