//! The Prometheus exposition: the recorder (etcd's histogram buckets), the series sampled at
//! scrape time (sizes, process and allocator figures), and the text served at /metrics.
//! Counters and histograms are recorded where things happen (gRPC layer, Raft log and state machine, shards).

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use actcd_edge::SERVER_VERSION;
use actcd_store::{ReadView, RocksEngine};

/// etcd's disk latency buckets: 1 ms doubling to 8 s.
const DISK_BUCKETS: [f64; 14] =
    [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192];
/// etcd's peer round-trip buckets: 0.1 ms doubling 16 times.
const PEER_RTT_BUCKETS: [f64; 16] = [
    0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048, 0.4096,
    0.8192, 1.6384, 3.2768,
];
/// Prometheus's default buckets, which go-grpc-prometheus uses for handling time.
const GRPC_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Commands per group commit.
const BATCH_BUCKETS: [f64; 13] =
    [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0];

/// How often recorded histogram samples are folded into their buckets. The recorder keeps each
/// sample (value and time) until then or until a scrape: a server nobody scrapes would grow by
/// ~19 bytes per request without it (measured by the metrics test `unscraped_histogram_...`).
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Folds histogram samples into their buckets every [`UPKEEP_INTERVAL`], for the life of the
/// server.
pub async fn upkeep(handle: PrometheusHandle) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// Installs the process-wide recorder and sets the series that never change.
pub fn install(quota_bytes: u64) -> anyhow::Result<PrometheusHandle> {
    let buckets: [(Matcher, &[f64]); 4] = [
        (Matcher::Prefix(actcd_store::metric_names::ETCD_DISK_PREFIX.into()), &DISK_BUCKETS),
        (
            Matcher::Full(actcd_store::metric_names::ETCD_NETWORK_PEER_ROUND_TRIP_TIME_SECONDS.into()),
            &PEER_RTT_BUCKETS,
        ),
        (Matcher::Full(actcd_store::metric_names::GRPC_SERVER_HANDLING_SECONDS.into()), &GRPC_BUCKETS),
        (Matcher::Full(actcd_store::metric_names::ACTCD_STORE_BATCH_SIZE.into()), &BATCH_BUCKETS),
    ];
    let handle = buckets
        .into_iter()
        .try_fold(PrometheusBuilder::new(), |builder, (matcher, values)| {
            builder.set_buckets_for_metric(matcher, values)
        })?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    // No leader until openraft names one (`actcd_raft::cluster::start::follow_term` keeps these).
    metrics::gauge!(actcd_store::metric_names::ETCD_SERVER_HAS_LEADER).set(0.0);
    metrics::gauge!(actcd_store::metric_names::ETCD_SERVER_IS_LEADER).set(0.0);
    metrics::counter!(actcd_store::metric_names::ETCD_SERVER_LEADER_CHANGES_SEEN_TOTAL).absolute(0);
    metrics::gauge!(actcd_store::metric_names::ETCD_SERVER_QUOTA_BACKEND_BYTES).set(quota_bytes as f64);
    metrics::gauge!(actcd_store::metric_names::ETCD_SERVER_VERSION, "server_version" => SERVER_VERSION)
        .set(1.0);
    metrics::gauge!(actcd_store::metric_names::ETCD_SERVER_PROPOSALS_PENDING).set(0.0);
    for name in [
        actcd_store::metric_names::ETCD_SERVER_PROPOSALS_COMMITTED_TOTAL,
        actcd_store::metric_names::ETCD_SERVER_PROPOSALS_APPLIED_TOTAL,
        actcd_store::metric_names::ETCD_SERVER_PROPOSALS_FAILED_TOTAL,
        actcd_store::metric_names::ETCD_MVCC_PUT_TOTAL,
        actcd_store::metric_names::ETCD_MVCC_RANGE_TOTAL,
        actcd_store::metric_names::ETCD_MVCC_DELETE_TOTAL,
        actcd_store::metric_names::ETCD_MVCC_TXN_TOTAL,
        actcd_store::metric_names::ACTCD_STORE_FSYNCS_TOTAL,
        actcd_store::metric_names::ETCD_NETWORK_CLIENT_GRPC_RECEIVED_BYTES_TOTAL,
        actcd_store::metric_names::ETCD_NETWORK_CLIENT_GRPC_SENT_BYTES_TOTAL,
    ] {
        metrics::counter!(name).absolute(0);
    }
    crate::transport::grpc_metrics::preinitialise();
    Ok(handle)
}

/// Samples the gauges that are read rather than recorded, then renders everything.
pub fn render(handle: &PrometheusHandle, view: &ReadView<RocksEngine>) -> String {
    let db = view.db_size() as f64;
    metrics::gauge!(actcd_store::metric_names::ETCD_MVCC_DB_TOTAL_SIZE_IN_BYTES).set(db);
    metrics::gauge!(actcd_store::metric_names::ETCD_MVCC_DB_TOTAL_SIZE_IN_USE_IN_BYTES).set(db);
    if let Ok((keys, index_bytes)) = view.index_stats() {
        metrics::gauge!(actcd_store::metric_names::ETCD_DEBUGGING_MVCC_KEYS_TOTAL).set(keys as f64);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Index.label()).set(index_bytes as f64);
    }
    for (name, value) in view.engine_memory() {
        metrics::gauge!(name).set(value as f64);
    }
    sample_allocator();
    sample_process();
    handle.render()
}

fn sample_allocator() {
    use tikv_jemalloc_ctl::{epoch, stats};
    // jemalloc caches its statistics until the epoch advances.
    if epoch::advance().is_err() {
        return;
    }
    if let Ok(v) = stats::allocated::read() {
        metrics::gauge!(actcd_store::metric_names::ACTCD_JEMALLOC_ALLOCATED_BYTES).set(v as f64);
    }
    if let Ok(v) = stats::resident::read() {
        metrics::gauge!(actcd_store::metric_names::ACTCD_JEMALLOC_RESIDENT_BYTES).set(v as f64);
    }
    if let Ok(v) = stats::active::read() {
        metrics::gauge!(actcd_store::metric_names::ACTCD_JEMALLOC_ACTIVE_BYTES).set(v as f64);
    }
}

/// The Prometheus client's process collector, read from /proc.
fn sample_process() {
    const PAGE: f64 = 4096.0;
    const TICKS: f64 = 100.0;
    if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
        let mut fields = statm.split_whitespace().map(|f| f.parse::<f64>().unwrap_or(0.0));
        let (size, resident) = (fields.next().unwrap_or(0.0), fields.next().unwrap_or(0.0));
        metrics::gauge!(actcd_store::metric_names::PROCESS_VIRTUAL_MEMORY_BYTES).set(size * PAGE);
        metrics::gauge!(actcd_store::metric_names::PROCESS_RESIDENT_MEMORY_BYTES).set(resident * PAGE);
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the command name, which may contain spaces, start at ") ".
        let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
        let fields: Vec<f64> = rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        if fields.len() > 20 {
            // A gauge: the metrics facade's counters are integers, and whole seconds are too coarse.
            metrics::gauge!(actcd_store::metric_names::PROCESS_CPU_SECONDS_TOTAL)
                .set((fields[11] + fields[12]) / TICKS);
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<f64>().ok()))
                })
                .unwrap_or(0.0);
            metrics::gauge!(actcd_store::metric_names::PROCESS_START_TIME_SECONDS)
                .set(boot + fields[19] / TICKS);
        }
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metrics::gauge!(actcd_store::metric_names::PROCESS_OPEN_FDS).set(fds.count() as f64);
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        let max = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok());
        if let Some(max) = max {
            metrics::gauge!(actcd_store::metric_names::PROCESS_MAX_FDS).set(max);
        }
    }
}
