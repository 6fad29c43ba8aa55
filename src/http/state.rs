//! What the HTTP paths answer from, on both kinds of URL.

use metrics_exporter_prometheus::PrometheusHandle;

use crate::grpc::store_handle::StoreHandle;

/// The store and the recorder the HTTP paths read.
#[derive(Clone)]
pub struct HttpState {
    /// The store, for the health checks and sampled gauges.
    pub store: StoreHandle,
    /// The Prometheus recorder.
    pub prometheus: PrometheusHandle,
}
