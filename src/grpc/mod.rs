//! The etcd v3 gRPC services, as one member answers them. Each is a thin edge over the actors:
//! it decodes a request, submits it to the store through the shared [`store_handle::StoreHandle`]
//! (reads on the read view, writes as typed requests through the Raft log, whose state machine makes every check
//! a write gets) or starts the actor that owns a stream, and turns the answer, or the store's
//! error, into etcd's response or status (`actcd_edge::status` maps the errors). The services
//! know the actors and what the transport leaves in each request; neither knows the services.
//!
//! # Layout
//! - [`kv`]: KV: reads on the read view, writes through the Raft log.
//! - [`range_answer`]: a Range's answer built as its message's bytes, sent from those bytes.
//! - [`read_budget`]: the bytes all large reads' answers may hold together.
//! - [`range_stream`]: KV.RangeStream's chunks, read one at a time at a pinned revision.
//! - [`watch`]: Watch: one StreamActor per stream, attached to its connection's ConnActor.
//! - [`watch_route`]: the Watch RPC's route, which sends events encoded once as they are.
//! - [`lease`]: Lease: grants and revokes through the Raft log; deadlines, time-to-live and
//!   keep-alive streams in the LeaseActor.
//! - [`maintenance`]: Maintenance and Cluster: status, alarms, hashes, defragment, snapshots,
//!   the members.
//! - [`concurrency`]: Lock and Election, as etcd builds them: clients of KV, Watch and Lease.
//! - [`auth`]: Auth: users, roles, permissions and tokens, through the Raft log.
//! - [`tokens`]: `--auth-token`: simple tokens or signed JWTs.
//! - [`who`]: who sent a request (its token) and whether the auth state lets them.
//! - [`health`]: the standard grpc.health.v1 service, which etcd serves on its client port too.
//! - [`api`]: the served API declared once: each service and its gateway paths, one row each.
//! - [`services`]: the one instance of each service, shared by every listener and the gateway,
//!   and the handler of each of its calls.
//! - [`store_handle`]: the read view, the typed write API and the engine every service reaches the store by.
//! - [`arbiter_pool`]: the threads the stream and connection actors are spread over.
//! - [`learner_gate`]: a learner refuses all but Status, serializable Range and Snapshot.
//! - [`require_leader`]: etcd's require-leader metadata: no leader, no answer but "no leader".

pub mod api;
pub mod arbiter_pool;
pub mod auth;
pub mod concurrency;
pub mod health;
pub mod kv;
pub mod learner_gate;
pub mod lease;
pub mod maintenance;
pub mod range_answer;
pub mod range_stream;
pub mod read_budget;
pub mod require_leader;
pub mod services;
pub mod store_handle;
pub mod tokens;
pub mod watch;
pub mod watch_route;
pub mod who;
