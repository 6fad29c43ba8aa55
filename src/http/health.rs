//! /health and /version, etcd's older probes: JSON bodies that kubeadm and monitoring scripts
//! read. /health fails, in this order, on an active alarm (unless `?exclude=NAME` names it, as
//! often as needed), on a member with no leader, and on a failed read; the body says which
//! (etcd 3.5's form, with `reason`; 3.4 sent `{"health":"false"}` only). Every answer counts
//! in `etcd_server_health_success` or `etcd_server_health_failures`, as on etcd.

use actcd_edge::SERVER_VERSION;
use actcd_proto::etcdserverpb::{AlarmType, RangeRequest};
use actcd_store::metric_names::{ETCD_SERVER_HEALTH_FAILURES, ETCD_SERVER_HEALTH_SUCCESS};
use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;

use super::state::HttpState;

fn json(status: StatusCode, body: String) -> impl IntoResponse {
    (status, [(header::CONTENT_TYPE, "application/json")], body)
}

/// etcd's /health. `serializable` is accepted and changes nothing: the read is local either
/// way, and the leader check is what a linearizable read would add.
pub async fn health(
    State(HttpState { store, .. }): State<HttpState>,
    RawQuery(query): RawQuery,
) -> impl IntoResponse {
    let excluded: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(key, _)| key == "exclude")
        .map(|(_, value)| value.to_uppercase())
        .collect();
    let reason = unhealthy_reason(&store, &excluded);
    match reason {
        None => {
            metrics::counter!(ETCD_SERVER_HEALTH_SUCCESS).increment(1);
            json(StatusCode::OK, r#"{"health":"true","reason":""}"#.to_string())
        }
        Some(reason) => {
            metrics::counter!(ETCD_SERVER_HEALTH_FAILURES).increment(1);
            tracing::warn!(%reason, "serving /health false");
            json(StatusCode::SERVICE_UNAVAILABLE, format!(r#"{{"health":"false","reason":"{reason}"}}"#))
        }
    }
}

fn unhealthy_reason(store: &crate::grpc::store_handle::StoreHandle, excluded: &[String]) -> Option<String> {
    for alarm in store.view.alarms(AlarmType::None).unwrap_or_default() {
        let name = AlarmType::try_from(alarm.alarm).map(|a| a.as_str_name()).unwrap_or("UNKNOWN");
        if !excluded.iter().any(|e| e == name) {
            return Some(format!("ALARM {name}"));
        }
    }
    if store.route.raft().metrics().borrow().current_leader.is_none() {
        return Some("RAFT NO LEADER".to_string());
    }
    let probe = RangeRequest { key: Bytes::from_static(b"health"), ..Default::default() };
    match store.view.range(&probe) {
        Ok(_) => None,
        Err(err) => Some(format!("QGET ERROR:{}", err.to_string().replace('"', "'"))),
    }
}

/// etcd's /version: the server and cluster versions actcd answers as.
pub async fn version() -> impl IntoResponse {
    json(StatusCode::OK, format!(r#"{{"etcdserver":"{SERVER_VERSION}","etcdcluster":"{SERVER_VERSION}"}}"#))
}
