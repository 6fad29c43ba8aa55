//! The metrics URLs: /metrics (Prometheus text), and /health and /version with etcd's JSON
//! bodies, so that probes written for etcd (kubeadm's, say) work unchanged.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;

use actcd_proto::etcdserverpb::{AlarmType, RangeRequest};

use crate::grpc::maintenance::SERVER_VERSION;
use crate::grpc::store_handle::StoreHandle;
use crate::transport::connection_budget::{BudgetedListener, TlsBudgetedListener};

/// What the metrics URLs serve from.
#[derive(Clone)]
pub struct MetricsState {
    /// The store, for the health probe and sampled gauges.
    pub store: StoreHandle,
    /// The Prometheus recorder.
    pub prometheus: PrometheusHandle,
}

fn app(state: MetricsState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/version", get(version))
        .with_state(state)
}

/// Serves /metrics, /health and /version until the listener fails.
pub async fn serve(listener: BudgetedListener, state: MetricsState) {
    if let Err(err) = axum::serve(listener, app(state)).await {
        tracing::error!(%err, "health endpoint stopped");
    }
}

/// [`serve`] on an https URL.
pub async fn serve_tls(listener: TlsBudgetedListener, state: MetricsState) {
    if let Err(err) = axum::serve(listener, app(state)).await {
        tracing::error!(%err, "health endpoint stopped");
    }
}

fn json(status: StatusCode, body: String) -> impl IntoResponse {
    (status, [(header::CONTENT_TYPE, "application/json")], body)
}

/// The Prometheus text: the recorded series and those sampled now.
async fn metrics(State(state): State<MetricsState>) -> impl IntoResponse {
    let text = crate::metrics::prometheus::render(&state.prometheus, &state.store.view);
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// etcd's health check: unhealthy while an alarm is active (unless `exclude=NAME` names it),
/// or when a read of the `health` key fails. `serializable` is accepted: a single member's
/// reads are the same either way.
async fn health(
    State(MetricsState { store, .. }): State<MetricsState>,
    RawQuery(query): RawQuery,
) -> impl IntoResponse {
    let excluded: Vec<String> = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.strip_prefix("exclude="))
        .map(str::to_uppercase)
        .collect();
    let unhealthy = |reason: String| {
        json(StatusCode::SERVICE_UNAVAILABLE, format!(r#"{{"health":"false","reason":"{reason}"}}"#))
    };
    let alarms = store.view.alarms(AlarmType::None).unwrap_or_default();
    for alarm in alarms {
        let name = AlarmType::try_from(alarm.alarm).map(|a| a.as_str_name()).unwrap_or("UNKNOWN");
        if !excluded.iter().any(|e| e == name) {
            return unhealthy(format!("ALARM {name}"));
        }
    }
    let probe = RangeRequest { key: Bytes::from_static(b"health"), ..Default::default() };
    match store.view.range(&probe) {
        Ok(_) => json(StatusCode::OK, r#"{"health":"true","reason":""}"#.to_string()),
        Err(err) => unhealthy(format!("QGET ERROR:{}", err.to_string().replace('"', "'"))),
    }
}

async fn version() -> impl IntoResponse {
    json(StatusCode::OK, format!(r#"{{"etcdserver":"{SERVER_VERSION}","etcdcluster":"{SERVER_VERSION}"}}"#))
}
