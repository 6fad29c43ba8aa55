//! /health and /version on the metrics URLs, with etcd's JSON bodies, so that probes written for
//! etcd (kubeadm's, say) work unchanged.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use tokio::net::TcpListener;

use actcd_proto::etcdserverpb::RangeRequest;

use crate::kv::StoreHandle;
use crate::maintenance::SERVER_VERSION;

/// Serves until the listener fails.
pub async fn serve(listener: TcpListener, store: StoreHandle) {
    let app = Router::new().route("/health", get(health)).route("/version", get(version)).with_state(store);
    if let Err(err) = axum::serve(listener, app).await {
        tracing::error!(%err, "health endpoint stopped");
    }
}

fn json(status: StatusCode, body: String) -> impl IntoResponse {
    (status, [(header::CONTENT_TYPE, "application/json")], body)
}

/// Healthy when a read of the `health` key succeeds, as etcd's check does.
async fn health(State(store): State<StoreHandle>) -> impl IntoResponse {
    let probe = RangeRequest { key: Bytes::from_static(b"health"), ..Default::default() };
    match store.view.range(&probe) {
        Ok(_) => json(StatusCode::OK, r#"{"health":"true","reason":""}"#.to_string()),
        Err(err) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(r#"{{"health":"false","reason":"RANGE ERROR:{}"}}"#, err.to_string().replace('"', "'")),
        ),
    }
}

async fn version() -> impl IntoResponse {
    json(StatusCode::OK, format!(r#"{{"etcdserver":"{SERVER_VERSION}","etcdcluster":"{SERVER_VERSION}"}}"#))
}
