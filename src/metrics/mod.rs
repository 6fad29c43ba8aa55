//! What the metrics URLs (`--listen-metrics-urls`) serve: the Prometheus text at /metrics, and
//! /health and /version as etcd answers them. Series are recorded where things happen (the gRPC
//! metrics layer, the store and watch actors); this is where the recorder is installed and
//! where the figures nobody records as they change (sizes, allocator, process) are sampled, at
//! scrape time.
//!
//! # Layout
//! - [`prometheus`]: the recorder with etcd's buckets, the series that never change, the figures
//!   sampled at scrape time, and the rendered text.
//! - [`endpoint`]: the HTTP server on the metrics URLs (/metrics, /health, /version), its
//!   sockets within the connection budget.

pub mod endpoint;
pub mod prometheus;
