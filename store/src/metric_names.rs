//! Every metric name actcd exports, in one place, and the actor kinds that label the per-actor
//! series. etcd's names (etcd_*, grpc_*, process_*) are what etcd's dashboards and alerts query,
//! so they are part of the contract; actcd's own (actcd_*) are what its dashboards query
//! (grafana/generate.py). A name used anywhere else is a constant from here, so a rename is one
//! edit and a typo is a compile error.

// Each constant is named for the series it names: a doc line would repeat it.
#![allow(missing_docs)]

/// The `actor` label of the per-actor series (heap bytes, mailbox depth, live actors): one value
/// per kind of actor, never one per actor, so the label set stays bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    /// The apply stage: the proposer's queue and the state machine's single writer. Its label
    /// stays `store`, the value dashboards and alerts already select.
    Apply,
    /// The revision index (held by the store, reported apart because it is the memory headline).
    Index,
    /// A watch shard (also labelled by its number).
    WatchShard,
    /// A Watch stream.
    Stream,
    /// A client connection.
    Conn,
    /// The lease actor.
    Lease,
}

impl ActorKind {
    /// Every kind, for series that must exist before the first actor of a kind does.
    pub const ALL: [ActorKind; 6] = [
        ActorKind::Apply,
        ActorKind::Index,
        ActorKind::WatchShard,
        ActorKind::Stream,
        ActorKind::Conn,
        ActorKind::Lease,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            ActorKind::Apply => "store",
            ActorKind::Index => "index",
            ActorKind::WatchShard => "watch_shard",
            ActorKind::Stream => "stream",
            ActorKind::Conn => "conn",
            ActorKind::Lease => "lease",
        }
    }
}

pub const ACTCD_ACTOR_HEAP_BYTES: &str = "actcd_actor_heap_bytes";
pub const ACTCD_ACTOR_MAILBOX_DEPTH: &str = "actcd_actor_mailbox_depth";
pub const ACTCD_ACTORS: &str = "actcd_actors";
pub const ACTCD_CLIENT_CONNECTIONS: &str = "actcd_client_connections";
pub const ACTCD_CLIENT_CONNECTIONS_LIMIT: &str = "actcd_client_connections_limit";
pub const ACTCD_CLIENT_CONNECTIONS_REFUSED_TOTAL: &str = "actcd_client_connections_refused_total";
pub const ACTCD_JEMALLOC_ACTIVE_BYTES: &str = "actcd_jemalloc_active_bytes";
pub const ACTCD_JEMALLOC_ALLOCATED_BYTES: &str = "actcd_jemalloc_allocated_bytes";
pub const ACTCD_JEMALLOC_RESIDENT_BYTES: &str = "actcd_jemalloc_resident_bytes";
pub const ACTCD_ROCKSDB_BLOCK_CACHE_BYTES: &str = "actcd_rocksdb_block_cache_bytes";
pub const ACTCD_ROCKSDB_ESTIMATED_KEYS: &str = "actcd_rocksdb_estimated_keys";
pub const ACTCD_ROCKSDB_MEMTABLE_BYTES: &str = "actcd_rocksdb_memtable_bytes";
pub const ACTCD_ROCKSDB_PENDING_COMPACTION_BYTES: &str = "actcd_rocksdb_pending_compaction_bytes";
pub const ACTCD_STORE_BATCH_SIZE: &str = "actcd_store_batch_size";
pub const ACTCD_STORE_FSYNCS_TOTAL: &str = "actcd_store_fsyncs_total";
pub const ACTCD_WATCHES: &str = "actcd_watches";
pub const ETCD_DEBUGGING_MVCC_KEYS_TOTAL: &str = "etcd_debugging_mvcc_keys_total";
pub const ETCD_DEBUGGING_MVCC_PENDING_EVENTS_TOTAL: &str = "etcd_debugging_mvcc_pending_events_total";
pub const ETCD_DEBUGGING_MVCC_SLOW_WATCHER_TOTAL: &str = "etcd_debugging_mvcc_slow_watcher_total";
pub const ETCD_DEBUGGING_MVCC_WATCH_STREAM_TOTAL: &str = "etcd_debugging_mvcc_watch_stream_total";
pub const ETCD_DEBUGGING_MVCC_WATCHER_TOTAL: &str = "etcd_debugging_mvcc_watcher_total";
/// The prefix of etcd's disk histograms (their buckets are set by prefix).
pub const ETCD_DISK_PREFIX: &str = "etcd_disk_";
pub const ETCD_DISK_BACKEND_COMMIT_DURATION_SECONDS: &str = "etcd_disk_backend_commit_duration_seconds";
pub const ETCD_DISK_WAL_FSYNC_DURATION_SECONDS: &str = "etcd_disk_wal_fsync_duration_seconds";
pub const ETCD_MVCC_DB_TOTAL_SIZE_IN_BYTES: &str = "etcd_mvcc_db_total_size_in_bytes";
pub const ETCD_MVCC_DB_TOTAL_SIZE_IN_USE_IN_BYTES: &str = "etcd_mvcc_db_total_size_in_use_in_bytes";
pub const ETCD_MVCC_DELETE_TOTAL: &str = "etcd_mvcc_delete_total";
pub const ETCD_MVCC_PUT_TOTAL: &str = "etcd_mvcc_put_total";
pub const ETCD_MVCC_RANGE_TOTAL: &str = "etcd_mvcc_range_total";
pub const ETCD_MVCC_TXN_TOTAL: &str = "etcd_mvcc_txn_total";
pub const ETCD_NETWORK_CLIENT_GRPC_RECEIVED_BYTES_TOTAL: &str =
    "etcd_network_client_grpc_received_bytes_total";
pub const ETCD_NETWORK_CLIENT_GRPC_SENT_BYTES_TOTAL: &str = "etcd_network_client_grpc_sent_bytes_total";
/// Bytes received from each peer (label `From`, the peer's member id in hex, as etcd's).
pub const ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL: &str = "etcd_network_peer_received_bytes_total";
/// Round trips of append calls (heartbeats included) to each peer (label `To`).
pub const ETCD_NETWORK_PEER_ROUND_TRIP_TIME_SECONDS: &str = "etcd_network_peer_round_trip_time_seconds";
/// Bytes sent to each peer (label `To`).
pub const ETCD_NETWORK_PEER_SENT_BYTES_TOTAL: &str = "etcd_network_peer_sent_bytes_total";
pub const ETCD_SERVER_HAS_LEADER: &str = "etcd_server_has_leader";
/// /health answers that said false.
pub const ETCD_SERVER_HEALTH_FAILURES: &str = "etcd_server_health_failures";
/// /health answers that said true.
pub const ETCD_SERVER_HEALTH_SUCCESS: &str = "etcd_server_health_success";
/// The last outcome of each /livez and /readyz check (labels `type`, `name`): 1 passed, 0 failed.
pub const ETCD_SERVER_HEALTHCHECK: &str = "etcd_server_healthcheck";
/// Runs of each /livez and /readyz check (labels `type`, `name`, `status`).
pub const ETCD_SERVER_HEALTHCHECKS_TOTAL: &str = "etcd_server_healthchecks_total";
pub const ETCD_SERVER_IS_LEADER: &str = "etcd_server_is_leader";
pub const ETCD_SERVER_LEADER_CHANGES_SEEN_TOTAL: &str = "etcd_server_leader_changes_seen_total";
pub const ETCD_SERVER_PROPOSALS_APPLIED_TOTAL: &str = "etcd_server_proposals_applied_total";
pub const ETCD_SERVER_PROPOSALS_COMMITTED_TOTAL: &str = "etcd_server_proposals_committed_total";
pub const ETCD_SERVER_PROPOSALS_FAILED_TOTAL: &str = "etcd_server_proposals_failed_total";
pub const ETCD_SERVER_PROPOSALS_PENDING: &str = "etcd_server_proposals_pending";
pub const ETCD_SERVER_QUOTA_BACKEND_BYTES: &str = "etcd_server_quota_backend_bytes";
pub const ETCD_SERVER_VERSION: &str = "etcd_server_version";
pub const GRPC_SERVER_HANDLED_TOTAL: &str = "grpc_server_handled_total";
pub const GRPC_SERVER_HANDLING_SECONDS: &str = "grpc_server_handling_seconds";
pub const GRPC_SERVER_MSG_RECEIVED_TOTAL: &str = "grpc_server_msg_received_total";
pub const GRPC_SERVER_MSG_SENT_TOTAL: &str = "grpc_server_msg_sent_total";
pub const GRPC_SERVER_STARTED_TOTAL: &str = "grpc_server_started_total";
pub const PROCESS_CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
pub const PROCESS_MAX_FDS: &str = "process_max_fds";
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
pub const PROCESS_RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
pub const PROCESS_START_TIME_SECONDS: &str = "process_start_time_seconds";
pub const PROCESS_VIRTUAL_MEMORY_BYTES: &str = "process_virtual_memory_bytes";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actor_labels_are_distinct_and_prometheus_safe() {
        let labels: std::collections::HashSet<_> = ActorKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), ActorKind::ALL.len());
        assert!(labels.iter().all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }
}

/// Handles of the series that move on every write or every watch delivery. Recording through
/// `metrics::gauge!(NAME, labels)` looks the series up in the registry each time (it hashes
/// the name and labels); these look it up once, at first use, which is after the server
/// installed its recorder (nothing records before `metrics::prometheus::install`). The lookups
/// of one put took 7-9 % of the server's CPU at 100 x 1000 puts (perf, 2026-12-06).
pub mod hot {
    use std::sync::OnceLock;

    use metrics::{Counter, Gauge};

    use super::ActorKind;

    /// `actcd_actor_mailbox_depth` of one kind of actor.
    pub fn mailbox_depth(kind: ActorKind) -> &'static Gauge {
        static DEPTHS: [OnceLock<Gauge>; ActorKind::ALL.len()] =
            [const { OnceLock::new() }; ActorKind::ALL.len()];
        DEPTHS[kind as usize]
            .get_or_init(|| metrics::gauge!(super::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => kind.label()))
    }

    /// `etcd_server_proposals_pending`.
    pub fn proposals_pending() -> &'static Gauge {
        static HANDLE: OnceLock<Gauge> = OnceLock::new();
        HANDLE.get_or_init(|| metrics::gauge!(super::ETCD_SERVER_PROPOSALS_PENDING))
    }

    /// `etcd_debugging_mvcc_pending_events_total`.
    pub fn pending_events() -> &'static Gauge {
        static HANDLE: OnceLock<Gauge> = OnceLock::new();
        HANDLE.get_or_init(|| metrics::gauge!(super::ETCD_DEBUGGING_MVCC_PENDING_EVENTS_TOTAL))
    }

    /// `etcd_mvcc_put_total`.
    pub fn mvcc_puts() -> &'static Counter {
        static HANDLE: OnceLock<Counter> = OnceLock::new();
        HANDLE.get_or_init(|| metrics::counter!(super::ETCD_MVCC_PUT_TOTAL))
    }
}
