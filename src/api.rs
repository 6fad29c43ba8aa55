//! The gRPC API this server serves, by name: etcd's services, the standard health service, and
//! the methods whose calls are labelled by name, with their gRPC types. Three parts of the
//! server name them and must agree: the health service answers SERVING for these services,
//! grpc-go's error texts tell an unknown method of a known service from an unknown service, and
//! the metrics layer labels each call by method and pre-initialises its series. Kept here, below
//! the services and the transport layers alike, so that each reads one list and neither imports
//! the other for it.

/// etcd's gRPC services, by their full names.
pub const ETCD_SERVICES: [&str; 6] = [
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance",
    "etcdserverpb.Auth",
];

/// The standard health service's own name.
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

/// The methods the metrics layer labels by name, as (service, method, gRPC type), each one's
/// series pre-initialised to 0 as go-grpc-prometheus does. Not every method of the services
/// above: calls of the others (Auth's, Hash, MoveLeader, Downgrade, the membership changes,
/// KV.RangeStream, Health.Watch) share the `unknown` labels.
pub const METHODS: &[(&str, &str, &str)] = &[
    ("etcdserverpb.KV", "Range", "unary"),
    ("etcdserverpb.KV", "Put", "unary"),
    ("etcdserverpb.KV", "DeleteRange", "unary"),
    ("etcdserverpb.KV", "Txn", "unary"),
    ("etcdserverpb.KV", "Compact", "unary"),
    ("etcdserverpb.Watch", "Watch", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseGrant", "unary"),
    ("etcdserverpb.Lease", "LeaseRevoke", "unary"),
    ("etcdserverpb.Lease", "LeaseKeepAlive", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseTimeToLive", "unary"),
    ("etcdserverpb.Lease", "LeaseLeases", "unary"),
    ("etcdserverpb.Cluster", "MemberList", "unary"),
    ("etcdserverpb.Maintenance", "Status", "unary"),
    ("etcdserverpb.Maintenance", "Alarm", "unary"),
    ("etcdserverpb.Maintenance", "Snapshot", "server_stream"),
    ("etcdserverpb.Maintenance", "HashKV", "unary"),
    ("etcdserverpb.Maintenance", "Defragment", "unary"),
    ("grpc.health.v1.Health", "Check", "unary"),
];
