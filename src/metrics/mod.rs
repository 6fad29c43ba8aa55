//! The Prometheus text that /metrics serves (on the metrics and client URLs, see
//! [`crate::http`]). Series are recorded where things happen (the gRPC
//! metrics layer, the store and watch actors); this is where the recorder is installed and
//! where the figures nobody records as they change (sizes, allocator, process) are sampled, at
//! scrape time.
//!
//! # Layout
//! - [`prometheus`]: the recorder with etcd's buckets, the series that never change, the figures
//!   sampled at scrape time, and the rendered text.
pub mod prometheus;
