//! Process wiring: open the store, start openraft over its log and state machine and the
//! Proposer beside it on the runtime, serve the peer transport on the peer URLs (a cluster of more
//! than this member), gRPC on every client URL from the serving threads (and /health, /version on
//! the metrics URLs) until SIGINT or SIGTERM.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr};
use anyhow::Context;
use futures::stream::BoxStream;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::Raft;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tower::ServiceBuilder;

use actcd_actors::identity::Identity;
use actcd_actors::lease::actor::LeaseActor;
use actcd_actors::lease::feed::LeaseChanges;
use actcd_actors::watch::shard::{ShardConfig, WatchShard};
use actcd_edge::config::{listen_urls, Config};
use actcd_edge::cors::{self, Cors};
use actcd_edge::tls::client as tls_client;
use actcd_edge::tls::TlsServer;
use actcd_proto::actcdpeerpb::peer_server::PeerServer;
use actcd_raft::cluster::corrupt_check::Hasher;
use actcd_raft::cluster::initial_cluster::{self, BootstrapFlags, InitialCluster};
use actcd_raft::cluster::leadership::LeaseForward;
use actcd_raft::cluster::move_leader::LeaderMover;
use actcd_raft::cluster::reconfigure::Reconfigurer;
use actcd_raft::cluster::start::Timing;
use actcd_raft::fail_stop::FailStop;
use actcd_raft::log_store::LogStore;
use actcd_raft::network::peer_service::{Forwarding, PeerService};
use actcd_raft::network::peers::{Peers, MAX_PEER_MESSAGE, PEER_WINDOW};
use actcd_raft::network::tls_connector::TlsConnector;
use actcd_raft::proposer::{Proposer, DEFAULT_BATCH_LIMIT};
use actcd_raft::read_barrier::ReadBarrier;
use actcd_raft::reconfig::Rules;
use actcd_raft::removed::{Removed, REMOVED_TEXT};
use actcd_raft::route::Route;
use actcd_raft::snapshot_store::SnapshotStore;
use actcd_raft::state_machine::{CoreHandle, StateMachine};
use actcd_raft::types::{MemberNode, TypeConfig};
use actcd_store::auto_compaction::AutoCompaction;
use actcd_store::backend::member::{self, MemberIds};
use actcd_store::{ReadView, RocksEngine, StoreConfig, StoreCore};

use crate::grpc::arbiter_pool::ArbiterPool;
use crate::grpc::learner_gate::LearnerGate;
use crate::grpc::lease::LeaseService;
use crate::grpc::maintenance::ClusterOps;
use crate::grpc::range_answer::send_encoded;
use crate::grpc::read_budget::ReadBudget;
use crate::grpc::require_leader::RequireLeader;
use crate::grpc::services::EtcdServices;
use crate::grpc::store_handle::StoreHandle;
use crate::grpc::tokens::Tokens;
use crate::grpc::watch::WatchService;
use crate::http::client_port::ClientHttp;
use crate::http::gateway::Gateway;
use crate::http::HttpState;
use crate::transport::client_socket::ClientSocket;
use crate::transport::connection_budget::{accepted, ConnectionBudget};
use crate::transport::connections::{ConnInfo, Connections};
use crate::transport::grpc_metrics::GrpcMetrics;
use crate::transport::listener::{incoming, SocketListener};
use crate::transport::range_backpressure::RangeBackpressure;
use crate::transport::serving::ServingThreads;

/// gRPC adds this much framing on top of the largest request etcd accepts (etcd's
/// grpcOverheadBytes); bigger messages are refused from their length prefix, before buffering.
const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// How long a starting single member waits to elect itself before it gives up. The member of
/// a larger cluster serves without one, as etcd's does: its requests wait for a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);

/// How long a stopping leader tries to hand its leadership over.
const HAND_OVER: Duration = Duration::from_secs(5);

/// Linearizable reads waiting for the next read-index round. When full, a reader waits for
/// room before it queues.
const READS_WAITING: usize = 65_536;

/// Applied batches whose lease changes the lessor has not taken yet. Past it a batch's changes
/// are dropped and the lessor lists the leases from the store instead (see
/// [`actcd_actors::lease::feed`]); the lessor takes them as they come, so only a stalled actor
/// fills it.
const LEASE_FEED_BATCHES: usize = 1024;

/// Runs the server until a shutdown signal: opens the storage, starts Raft over it, the actors
/// and services on top, and serves.
pub fn run(config: Config) -> anyhow::Result<()> {
    let edge = Edge::take(&config)?;
    let (mut storage, core) = Storage::open(&config, &edge)?;
    // Counted once storage is open, so that its descriptors are part of what is kept back.
    let budget = Arc::new(ConnectionBudget::for_this_process());
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("the tokio runtime must start")
    });
    system.block_on(async move {
        let serving = ServingThreads::start(config.serving_threads);
        let watch_tree = WatchTree::start(&config, &storage.view, &serving);
        let member = Member::start(&config, &edge, &mut storage, core, &watch_tree, &budget).await?;
        let services = start_services(&config, &edge, storage, watch_tree, member, budget, &serving);
        serve(&config, services, &serving, edge.client_listeners, edge.tls, edge.metrics_listeners).await
    })
}

/// What is read from the flags and taken before the storage opens, so that a bad flag or a
/// port in use stops the start with one clear line before anything else starts.
struct Edge {
    cluster: InitialCluster,
    auto_compaction: AutoCompaction,
    tokens: Arc<Tokens>,
    /// The https client and metrics URLs' TLS.
    tls: Option<TlsServer>,
    /// This member's peer listener and its dialer, if any peer URL is https.
    peer_tls: Option<(TlsServer, TlsConnector)>,
    prometheus: PrometheusHandle,
    client_listeners: Vec<(std::net::TcpListener, bool)>,
    metrics_listeners: Vec<(std::net::TcpListener, bool)>,
    /// `--initial-cluster-state existing`: joining a running cluster.
    existing: bool,
}

impl Edge {
    fn take(config: &Config) -> anyhow::Result<Self> {
        let cluster = InitialCluster::from_flags(BootstrapFlags {
            name: &config.name,
            initial_cluster: &config.initial_cluster,
            advertise_peer_urls: &config.initial_advertise_peer_urls,
            token: &config.initial_cluster_token,
        })?;
        let auto_compaction = config.auto_compaction()?;
        let tokens = Arc::new(Tokens::from_flag(&config.auth_token)?);
        crate::c_heap::start_trimmer().context("cannot start the heap trimmer")?;
        let client_urls = listen_urls(&config.listen_client_urls, "listen-client-urls")?;
        let metrics_urls = if config.listen_metrics_urls.is_empty() {
            Vec::new()
        } else {
            listen_urls(&config.listen_metrics_urls, "listen-metrics-urls")?
        };
        let tls = client_tls(config, &client_urls, &metrics_urls)?;
        let prometheus = crate::metrics::prometheus::install(config.quota_bytes())?;
        let client_listeners = bind_urls(&client_urls)?;
        let metrics_listeners = bind_urls(&metrics_urls)?;
        let peer_tls = peer_tls(config, &cluster)?;
        let existing = config.initial_cluster_state == "existing";
        Ok(Self {
            cluster,
            auto_compaction,
            tokens,
            tls,
            peer_tls,
            prometheus,
            client_listeners,
            metrics_listeners,
            existing,
        })
    }

    /// The first membership, the same on every member (the client URLs each publishes later);
    /// a member that joins gets it from the leader instead.
    fn first_membership(&self) -> Option<BTreeMap<u64, MemberNode>> {
        let node = |m: &initial_cluster::Member| MemberNode {
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            client_urls: Vec::new(),
        };
        let members = self.cluster.members.iter().map(|m| (m.id, node(m))).collect();
        (!self.existing).then_some(members)
    }

    /// The dialer of https peer URLs, if any peer URL is.
    fn peer_dialer(&self) -> Option<TlsConnector> {
        self.peer_tls.as_ref().map(|(_, dialer)| dialer.clone())
    }
}

/// The data dir opened: the store, the Raft log and snapshots, this member's ids, and whether
/// it has company (and so its peer ports).
struct Storage {
    engine: RocksEngine,
    snapshots: SnapshotStore,
    ids: MemberIds,
    /// More members than this one, now, at the start or ever: it serves the peer transport.
    company: bool,
    peer_urls: Vec<(SocketAddr, bool)>,
    peer_listeners: Vec<(std::net::TcpListener, bool)>,
    fail_stop_tx: FailStop,
    /// Gets the reason when the writer stops after a failed commit.
    fail_stop: tokio::sync::oneshot::Receiver<String>,
    log: LogStore,
    timing: Timing,
    view: ReadView<RocksEngine>,
}

impl Storage {
    /// Opens the data dir; the store core goes apart, to the state machine.
    fn open(config: &Config, edge: &Edge) -> anyhow::Result<(Self, StoreCore<RocksEngine>)> {
        let data_dir = config.data_dir.display();
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("cannot create data dir {data_dir}"))?;
        let engine = RocksEngine::open(&config.data_dir)
            .with_context(|| format!("cannot open data dir {data_dir}"))?;
        // Before anything reads the state: a snapshot install that a crash cut short left a mix.
        let snapshots = SnapshotStore::open(config.data_dir.join("raft-snapshots"))
            .map_err(|e| anyhow::anyhow!("cannot open the raft snapshots: {e}"))?;
        if snapshots
            .resume_install(&engine)
            .map_err(|e| anyhow::anyhow!("cannot finish installing a snapshot: {e}"))?
        {
            tracing::info!("finished installing the snapshot a stop had cut short");
        }
        let ids = member_ids(&edge.cluster, edge.existing, &engine, edge.peer_dialer())?;
        // A member alone has no peer to hear from, so it takes no peer port until it adds a
        // member (single members side by side need no --listen-peer-urls of their own); one that
        // ever had company, or joins, listens from the start.
        let recorded_members = actcd_raft::position::recorded_position(&engine)
            .map_err(|e| anyhow::anyhow!("cannot read the membership: {e}"))?
            .1
            .membership()
            .nodes()
            .count();
        let company = edge.cluster.members.len() > 1 || edge.existing || recorded_members > 1;
        let peer_urls = listen_urls(&config.listen_peer_urls, "listen-peer-urls")?;
        let peer_listeners = if company { bind_urls(&peer_urls)? } else { Vec::new() };
        let (fail_stop_tx, fail_stop) = tokio::sync::oneshot::channel();
        let fail_stop_tx = FailStop::new(fail_stop_tx);
        // A member alone has no follower to write beside its fsync: a flush behind its append
        // would only add a thread hop to every write (0.57 -> 0.67 ms at 1 x 1, benches/raft-path).
        let leads_followers = company.then_some(ids.member_id);
        let log = LogStore::open(&engine, leads_followers)
            .map_err(|e| anyhow::anyhow!("cannot open the raft log: {e}"))?
            .with_fail_stop(fail_stop_tx.clone());
        config.check_raft_timing()?;
        let timing = Timing {
            heartbeat_ms: config.heartbeat_interval,
            election_ms: config.election_timeout,
            snapshot_count: config.snapshot_count,
        };
        let store_config = StoreConfig {
            max_txn_ops: config.max_txn_ops,
            quota_bytes: config.quota_bytes(),
            max_request_bytes: config.max_request_bytes,
            member: Some(ids),
            token_ttl: Duration::from_secs(config.auth_token_ttl),
        };
        let core = StoreCore::open(engine.clone(), store_config)
            .with_context(|| format!("cannot load data dir {data_dir}"))?;
        let view = core.read_view();
        let storage = Self {
            engine,
            snapshots,
            ids,
            company,
            peer_urls,
            peer_listeners,
            fail_stop_tx,
            fail_stop,
            log,
            timing,
            view,
        };
        Ok((storage, core))
    }
}

/// The watch tree: its shards and the root the state machine sends applied batches to.
struct WatchTree {
    shards: Vec<Addr<WatchShard<RocksEngine>>>,
}

impl WatchTree {
    /// Starts the shards, shard `i` on serving thread `i`: the watchers of a stream live on the
    /// thread that serves its connection, so an event crosses no thread from shard to socket.
    fn start(config: &Config, view: &ReadView<RocksEngine>, serving: &ServingThreads) -> Self {
        let shard_config = ShardConfig {
            progress_interval: config.watch_progress_notify_interval,
            mailbox: config.mailboxes.watch_shard,
        };
        let shards: Vec<_> = serving
            .handles()
            .iter()
            .enumerate()
            .map(|(index, arbiter)| {
                let view = view.clone();
                WatchShard::start_in_arbiter(arbiter, move |_| WatchShard::new(index, view, shard_config))
            })
            .collect();
        Self { shards }
    }

    /// Where the state machine sends each applied batch: every shard, straight.
    fn recipients(&self) -> Vec<actix::Recipient<actcd_actors::watch::messages::Committed>> {
        self.shards.iter().map(|shard| shard.clone().recipient()).collect()
    }
}

/// This member's Raft, started, and what runs beside it.
struct Member {
    identity: Identity,
    raft: Raft<TypeConfig>,
    route: Route,
    reads: ReadBarrier,
    writer: Proposer,
    core: CoreHandle,
    removed: Removed,
    peers: Peers,
    leases: Addr<LeaseActor>,
    reconfigurer: Arc<Reconfigurer>,
    hasher: Hasher,
    forwarding: Forwarding,
    mover: LeaderMover,
}

impl Member {
    /// Starts Raft over the storage, the Proposer and the lessor beside it, serves the peer
    /// transport, and (alone) waits to lead and publishes this member's client URLs.
    async fn start(
        config: &Config,
        edge: &Edge,
        storage: &mut Storage,
        core: StoreCore<RocksEngine>,
        watch_tree: &WatchTree,
        budget: &Arc<ConnectionBudget>,
    ) -> anyhow::Result<Self> {
        let member = Self::start_raft(config, edge, storage, core, watch_tree).await?;
        member.serve_peers(edge, storage, budget)?;
        member.spawn_watchdogs(storage.timing);
        if !storage.company {
            actcd_raft::cluster::start::wait_for_leader(&member.raft, LEADER_WAIT).await?;
        }
        member.publish(config, edge, storage.company).await?;
        tokio::spawn(actcd_raft::cluster::start::follow_term(member.raft.clone(), member.identity.clone()));
        if config.initial_corrupt_check && storage.company {
            actcd_raft::cluster::corrupt_check::initial(&member.route, &member.peers, &member.hasher).await?;
        }
        Ok(member)
    }

    /// Starts openraft over the log and the state machine, and the Proposer, the read barrier
    /// and the lessor beside it.
    async fn start_raft(
        config: &Config,
        edge: &Edge,
        storage: &Storage,
        core: StoreCore<RocksEngine>,
        watch_tree: &WatchTree,
    ) -> anyhow::Result<Self> {
        let ids = storage.ids;
        let identity = Identity::new(ids.cluster_id, ids.member_id);
        let (lease_feed, lease_changes) = actcd_actors::lease::feed::channel(LEASE_FEED_BATCHES);
        let state_machine = StateMachine::new(core, storage.snapshots.clone(), watch_tree.recipients())
            .map_err(|e| anyhow::anyhow!("cannot open the state machine: {e}"))?
            .with_fail_stop(storage.fail_stop_tx.clone())
            .with_lease_feed(lease_feed)
            .with_log(&storage.log);
        let core = state_machine.core();
        let removed = state_machine.removed();
        let peers = Peers::new(ids.cluster_id, ids.member_id, edge.peer_dialer(), removed.clone());
        let first = edge.first_membership();
        let timing = storage.timing;
        let log = storage.log.clone();
        let raft = actcd_raft::cluster::start::start(
            ids.member_id,
            first,
            timing,
            peers.clone(),
            log,
            state_machine,
        )
        .await?;
        let route =
            Route::new(raft.clone(), ids.member_id, Arc::new(peers.clone()), timing.request_timeout());
        let reads = ReadBarrier::start(route.clone(), READS_WAITING);
        let batch_limit = config.batch_limit().unwrap_or(DEFAULT_BATCH_LIMIT);
        let writer = Proposer::start(route.clone(), config.mailboxes.proposer, batch_limit);
        actcd_raft::applied_sync::start(storage.engine.clone(), storage.fail_stop_tx.clone());
        let leases = Self::start_lessor(config, &route, &peers, &core, lease_changes, !storage.company)?;
        let rules = Rules { strict: config.strict_reconfig_check, max_learners: config.max_learners };
        let token = config.initial_cluster_token.clone();
        let reconfigurer =
            Arc::new(Reconfigurer::new(route.clone(), peers.clone(), removed.clone(), rules, token));
        let mover = leader_mover(&route, &peers, timing);
        Ok(Self {
            identity,
            raft,
            route,
            reads,
            writer,
            core,
            removed,
            peers,
            leases,
            reconfigurer,
            hasher: Hasher::new(storage.engine.clone(), storage.view.clone()),
            forwarding: Forwarding::default(),
            mover,
        })
    }

    /// The lessor, which follows this member's leadership: only a leader expires leases.
    fn start_lessor(
        config: &Config,
        route: &Route,
        peers: &Peers,
        core: &CoreHandle,
        changes: LeaseChanges,
        alone: bool,
    ) -> anyhow::Result<Addr<LeaseActor>> {
        let lease_leader = Arc::new(LeaseForward::new(route.clone(), peers.clone()));
        let leases = LeaseActor::new(
            Arc::new(route.clone()),
            Box::new(core.clone()),
            changes,
            lease_leader,
            alone,
            config.mailboxes.lease,
        )
        .map_err(|e| anyhow::anyhow!("cannot load the leases: {e}"))?
        .start();
        tokio::spawn(actcd_raft::cluster::leadership::follow(route.clone(), leases.clone()));
        Ok(leases)
    }

    /// Serves the peer transport now if the member has company, else once it adds a member.
    fn serve_peers(
        &self,
        edge: &Edge,
        storage: &mut Storage,
        budget: &Arc<ConnectionBudget>,
    ) -> anyhow::Result<()> {
        let (route, leases, reconfigurer) =
            (self.route.clone(), self.leases.clone(), Arc::clone(&self.reconfigurer));
        let (removed, hasher, forwarding) =
            (self.removed.clone(), self.hasher.clone(), self.forwarding.clone());
        let (cluster_id, snapshots) = (storage.ids.cluster_id, storage.snapshots.clone());
        let peer_serving = PeerServing {
            service: Arc::new(move || PeerService {
                route: route.clone(),
                cluster_id,
                snapshots: snapshots.clone(),
                leases: leases.clone(),
                reconfigurer: Arc::clone(&reconfigurer),
                removed: removed.clone(),
                hasher: hasher.clone(),
                forwarding: forwarding.clone(),
            }),
            tls: edge.peer_tls.as_ref().map(|(tls, _)| tls.clone()),
            budget: Arc::clone(budget),
        };
        if storage.company {
            return peer_serving.serve(std::mem::take(&mut storage.peer_listeners));
        }
        let urls = storage.peer_urls.clone();
        self.reconfigurer.on_grow(Box::new(move || {
            bind_urls(&urls).and_then(|listeners| peer_serving.serve(listeners)).map_err(|e| format!("{e:#}"))
        }));
        Ok(())
    }

    /// Spawns the checks that run as long as the member: quorum, and its peers' reachability.
    fn spawn_watchdogs(&self, timing: Timing) {
        let (heartbeat, election) =
            (Duration::from_millis(timing.heartbeat_ms), Duration::from_millis(timing.election_ms));
        tokio::spawn(actcd_raft::cluster::check_quorum::run(self.route.clone(), heartbeat, election));
        let (route, peers, removed) = (self.route.clone(), self.peers.clone(), self.removed.clone());
        tokio::spawn(actcd_raft::cluster::peer_probe::run(route, peers, removed, election));
    }

    /// Publishes this member's name and client URLs into the membership.
    async fn publish(&self, config: &Config, edge: &Edge, company: bool) -> anyhow::Result<()> {
        let own = MemberNode {
            name: config.name.clone(),
            peer_urls: edge.cluster.own().map(|m| m.peer_urls.clone()).unwrap_or_default(),
            client_urls: config.advertise_client_urls.clone(),
        };
        let publish = actcd_raft::cluster::reconfigure::publish(
            Arc::clone(&self.reconfigurer),
            self.route.clone(),
            own,
        );
        if company {
            tokio::spawn(publish);
            return Ok(());
        }
        // As etcd serves clients only once its member published its attributes: the first
        // MemberList already shows this member's client URLs. Alone, that is one local
        // membership entry.
        tokio::time::timeout(LEADER_WAIT, publish)
            .await
            .context("cannot publish this member's client URLs into the membership")
    }
}

/// The periodic corruption check (with the flag) and auto-compaction.
fn spawn_store_tasks(config: &Config, edge: &Edge, store: &StoreHandle, peers: Peers, hasher: Hasher) {
    if !config.corrupt_check_time.is_zero() {
        let every = config.corrupt_check_time;
        let (route, writer) = (store.route.clone(), store.writer.clone());
        tokio::spawn(actcd_raft::cluster::corrupt_check::periodic(route, peers, hasher, writer, every));
    }
    let (route, view, writer) = (store.route.clone(), store.view.clone(), store.writer.clone());
    tokio::spawn(actcd_raft::cluster::auto_compaction::run(route, view, writer, edge.auto_compaction));
}

/// What hands the leadership over (on SIGTERM, and MoveLeader), with etcd's timing.
fn leader_mover(route: &Route, peers: &Peers, timing: Timing) -> LeaderMover {
    let lease_ms = actcd_raft::cluster::start::election_window(timing.election_ms).1;
    LeaderMover::new(
        route.clone(),
        peers.clone(),
        Duration::from_millis(lease_ms),
        Duration::from_millis(timing.heartbeat_ms),
        Duration::from_millis(timing.election_ms),
    )
}

/// The services over the member, and their background tasks; their stream and connection
/// actors run on the serving threads.
fn start_services(
    config: &Config,
    edge: &Edge,
    storage: Storage,
    watch_tree: WatchTree,
    member: Member,
    budget: Arc<ConnectionBudget>,
    serving: &ServingThreads,
) -> Services {
    let require_leader =
        RequireLeader::new(member.raft.clone(), Duration::from_millis(storage.timing.election_ms));
    let store = StoreHandle {
        view: storage.view.clone(),
        writer: member.writer,
        route: member.route,
        reads: member.reads,
        core: member.core,
        identity: member.identity.clone(),
        max_txn_ops: config.max_txn_ops,
        max_request_bytes: config.max_request_bytes,
        read_budget: ReadBudget::new(config.read_budget_bytes),
        tokens: Arc::clone(&edge.tokens),
        engine: storage.engine,
    };
    spawn_store_tasks(config, edge, &store, member.peers, member.hasher);
    let stream_pool = ArbiterPool::new(serving.handles());
    let lease = Arc::new(LeaseService::new(store.clone(), member.leases, Arc::clone(&stream_pool)));
    let connections = Arc::new(Connections::default());
    let watch = Arc::new(WatchService {
        arbiters: stream_pool,
        shards: watch_tree.shards,
        view: storage.view,
        identity: member.identity,
        max_request_bytes: config.max_request_bytes,
        connections: Arc::clone(&connections),
        next_stream: AtomicU64::new(0),
        leader: require_leader.clone(),
        permit: crate::grpc::watch::watch_permit(store.view.clone(), Arc::clone(&store.tokens)),
    });
    let cluster_ops = ClusterOps { reconfigurer: member.reconfigurer, mover: member.mover.clone() };
    let etcd = Arc::new(EtcdServices::new(
        &store,
        watch,
        lease,
        config.quota_bytes(),
        config.bcrypt_cost,
        cluster_ops,
    ));
    Services {
        store,
        etcd,
        connections,
        budget,
        prometheus: edge.prometheus.clone(),
        fail_stop: storage.fail_stop,
        require_leader,
        raft: member.raft,
        mover: member.mover,
        forwarding: member.forwarding,
        removed: (member.removed, storage.ids.member_id),
    }
}

/// Serves the peer transport on `incoming`'s connections until the process ends.
fn spawn_peer_server<S, IO, IE>(server: tonic::transport::server::Router, incoming: S)
where
    S: futures::Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        if let Err(err) = server.serve_with_incoming(incoming).await {
            tracing::error!(%err, "the peer listener failed");
        }
    });
}

/// How to serve the peer transport: on the listeners taken at start, or on those a member
/// alone takes when it adds its first member.
struct PeerServing {
    /// A peer service for one listener.
    service: Arc<dyn Fn() -> PeerService + Send + Sync>,
    tls: Option<TlsServer>,
    budget: Arc<ConnectionBudget>,
}

impl PeerServing {
    fn serve(&self, listeners: Vec<(std::net::TcpListener, bool)>) -> anyhow::Result<()> {
        for (listener, is_tls) in listeners {
            let listener = TcpListener::from_std(listener).context("cannot serve on the peer listener")?;
            tracing::info!(addr = ?listener.local_addr().ok(), tls = is_tls, "serving peer traffic");
            let server = Server::builder()
                .initial_stream_window_size(PEER_WINDOW)
                .initial_connection_window_size(PEER_WINDOW)
                .add_service(
                    PeerServer::new((self.service)())
                        .max_decoding_message_size(MAX_PEER_MESSAGE)
                        .max_encoding_message_size(MAX_PEER_MESSAGE),
                );
            match (&self.tls, is_tls) {
                // Peer sockets count against the same descriptor budget; they have no client
                // streams, so a registry of their own that never holds an actor.
                (Some(tls), true) => spawn_peer_server(
                    server,
                    incoming(accepted(listener, Arc::clone(&self.budget)), Arc::default(), Some(tls.clone())),
                ),
                // Small Raft messages (heartbeats, one-write appends) leave at once.
                _ => spawn_peer_server(
                    server,
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
            }
        }
        Ok(())
    }
}

/// Takes the ports of `urls`, each with whether it serves TLS.
fn bind_urls(urls: &[(SocketAddr, bool)]) -> anyhow::Result<Vec<(std::net::TcpListener, bool)>> {
    let listeners = bind_all(&urls.iter().map(|(addr, _)| *addr).collect::<Vec<_>>())?;
    Ok(listeners.into_iter().zip(urls.iter().map(|(_, tls)| *tls)).collect())
}

/// This member's cluster and member ids: derived from the flags for a new cluster (and bound
/// to the data dir there); for a member joining an existing one, those the data dir holds, or
/// on its first start those its peers know it by.
fn member_ids(
    cluster: &InitialCluster,
    existing: bool,
    engine: &RocksEngine,
    tls: Option<TlsConnector>,
) -> anyhow::Result<MemberIds> {
    let stored = member::stored(engine).context("cannot read the data dir's member ids")?;
    if !existing {
        // etcd ignores --initial-cluster on a data dir it has started before, and members
        // restarted after a MemberAdd or MemberRemove are often given the membership as it
        // is now, whose cluster id is not the one the data dir was made with: the data dir's
        // ids stand when the flags name the same member (its peer URLs and token). Flags of
        // another member (or token) get the ids they name, which the store then refuses.
        return Ok(match stored {
            Some(ids) if ids.member_id == cluster.member_id => ids,
            _ => MemberIds { cluster_id: cluster.cluster_id, member_id: cluster.member_id },
        });
    }
    if let Some(ids) = stored {
        return Ok(ids);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ids = runtime.block_on(actcd_raft::cluster::join::discover(cluster, tls))?;
    tracing::info!(
        cluster = %format!("{:x}", ids.cluster_id),
        member = %format!("{:x}", ids.member_id),
        "joining the existing cluster"
    );
    Ok(ids)
}

/// Everything the gRPC listeners serve.
struct Services {
    store: StoreHandle,
    etcd: Arc<EtcdServices>,
    connections: Arc<Connections>,
    /// Client sockets allowed within the descriptor limit, on every listener.
    budget: Arc<ConnectionBudget>,
    prometheus: PrometheusHandle,
    /// Gets the reason when the writer stops after a failed commit.
    fail_stop: tokio::sync::oneshot::Receiver<String>,
    /// etcd's require-leader check, on every service.
    require_leader: RequireLeader,
    /// Hands the leadership over on SIGTERM.
    mover: LeaderMover,
    /// The followers' calls this member serves, answered before it stops.
    forwarding: Forwarding,
    /// The removed ids, and this member's: the process stops once its own is among them.
    removed: (Removed, u64),
    /// This member's Raft: systemd hears READY=1 once it knows a leader.
    raft: Raft<TypeConfig>,
}

impl Services {
    fn http_state(&self) -> HttpState {
        HttpState { store: self.store.clone(), prometheus: self.prometheus.clone() }
    }
}

fn bind_all(addrs: &[SocketAddr]) -> anyhow::Result<Vec<std::net::TcpListener>> {
    addrs
        .iter()
        .map(|addr| {
            let listener =
                std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
            listener.set_nonblocking(true).with_context(|| format!("cannot listen on {addr}"))?;
            Ok(listener)
        })
        .collect()
}

/// The TLS of the https client and metrics URLs, if any: etcd refuses an https URL without a
/// certificate, and warns about a certificate that no URL uses.
fn client_tls(
    config: &Config,
    client: &[(SocketAddr, bool)],
    metrics: &[(SocketAddr, bool)],
) -> anyhow::Result<Option<TlsServer>> {
    let flags = config.tls_flags();
    let mut urls =
        config.listen_client_urls.iter().zip(client).chain(config.listen_metrics_urls.iter().zip(metrics));
    let Some(url) = urls.find(|(_, (_, tls))| *tls).map(|(u, _)| u) else {
        if flags.has_certificate() {
            tracing::warn!("--cert-file/--key-file/--auto-tls are set but no --listen-client-urls is https: ignoring them");
        }
        return Ok(None);
    };
    if !flags.has_certificate() {
        anyhow::bail!(
            "TLS key/cert (--cert-file, --key-file) must be provided for client url {url} with HTTPS scheme"
        );
    }
    let hosts = url_hosts(config.listen_client_urls.iter().chain(&config.advertise_client_urls));
    Ok(Some(TlsServer::new(&flags, &hosts)?))
}

/// The TLS of the peer URLs, both ends, if any member's peer URL is https: this member's
/// listener, and its dialer to the others. A certificate is needed as soon as one URL is
/// https (a member dials every other's URL, and presents its certificate there).
fn peer_tls(config: &Config, cluster: &InitialCluster) -> anyhow::Result<Option<(TlsServer, TlsConnector)>> {
    let flags = config.peer_tls_flags()?;
    let https = |u: &&String| u.starts_with("https://");
    let listened = config.listen_peer_urls.iter().find(https);
    let dialed = cluster.members.iter().flat_map(|m| &m.peer_urls).find(https);
    let Some(url) = listened.or(dialed) else {
        if flags.has_certificate() {
            tracing::warn!("--peer-cert-file/--peer-key-file/--peer-auto-tls are set but no peer URL is https: ignoring them");
        }
        return Ok(None);
    };
    if !flags.has_certificate() {
        let host = url.trim_start_matches("https://").trim_end_matches('/');
        anyhow::bail!("cannot listen on TLS for {host}: KeyFile and CertFile are not presented");
    }
    let hosts = url_hosts(config.listen_peer_urls.iter().chain(&config.initial_advertise_peer_urls));
    let (listener, dialer) = tls_client::peer(&flags, &hosts)?;
    Ok(Some((listener, TlsConnector::new(dialer))))
}

/// The host names of `urls` (`scheme://host:port`), for auto TLS's self-signed certificate.
fn url_hosts<'a>(urls: impl Iterator<Item = &'a String>) -> Vec<String> {
    urls.filter_map(|u| u.split_once("://").map(|(_, rest)| rest.trim_end_matches('/')))
        .filter_map(|host_port| {
            host_port.rsplit_once(':').map(|(host, _)| host.trim_matches(['[', ']']).to_string())
        })
        .collect()
}

async fn serve(
    config: &Config,
    services: Services,
    serving: &ServingThreads,
    client_listeners: Vec<(std::net::TcpListener, bool)>,
    tls: Option<TlsServer>,
    metrics_listeners: Vec<(std::net::TcpListener, bool)>,
) -> anyhow::Result<()> {
    let mut listeners = Vec::new();
    for (listener, is_tls) in client_listeners {
        let listener = TcpListener::from_std(listener).context("cannot serve on the client listener")?;
        tracing::info!(addr = ?listener.local_addr().ok(), tls = is_tls, "serving client traffic");
        listeners.push((listener, is_tls));
    }
    tokio::spawn(crate::metrics::prometheus::upkeep(services.prometheus.clone()));
    for (listener, is_tls) in metrics_listeners {
        let listener = TcpListener::from_std(listener).context("cannot serve on the metrics listener")?;
        tracing::info!(addr = ?listener.local_addr().ok(), tls = is_tls, "serving /metrics, /health, /livez, /readyz and /version");
        let tls = tls.as_ref().filter(|_| is_tls).map(TlsServer::for_http1);
        let listener = SocketListener::new(listener, Arc::clone(&services.budget), tls)
            .context("cannot serve on the metrics listener")?;
        tokio::spawn(crate::http::serve(listener, services.http_state()));
    }
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    for (listener, is_tls) in listeners {
        let tls = tls.clone().filter(|_| is_tls);
        let ends = serving.serve(listener, Arc::clone(&services.budget), |sockets| {
            let mut shutdown = shutdown_rx.clone();
            let stop = async move {
                let _ = shutdown.wait_for(|stop| *stop).await;
            };
            let incoming = incoming(sockets, Arc::clone(&services.connections), tls.clone());
            serve_client(config, &services, incoming, stop)
        });
        for end in ends {
            // A thread that went away without an answer stopped with the process.
            servers.spawn(async move { end.await.unwrap_or(Ok(())) });
        }
    }
    tokio::spawn(crate::systemd::ready_once_led(services.raft.clone()));
    let (removed, me) = services.removed.clone();
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            // As etcd's leader does before it stops: a caught-up voter takes over at once,
            // so that clients wait no election timeout.
            services.mover.on_shutdown(HAND_OVER).await;
            services.forwarding.drained(HAND_OVER).await;
        }
        _ = removed.wait_for(me) => tracing::warn!("{REMOVED_TEXT}"),
        Some(result) = servers.join_next() => {
            result.context("server task failed")?.context("gRPC server failed")?;
        }
        Ok(reason) = services.fail_stop => {
            // etcd exits on a failed WAL write or fsync (fail-stop) and so does actcd: at once,
            // without draining, since nothing more can be acknowledged. A restart recovers
            // from what the disk holds.
            anyhow::bail!("the store failed a write and stopped taking writes: {reason}");
        }
    }
    crate::systemd::stopping();
    let _ = shutdown_tx.send(true);
    // In-flight requests get a moment to finish; acknowledged writes are already durable.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), async { while servers.join_next().await.is_some() {} })
            .await;
    actix::System::current().stop();
    Ok(())
}

/// Serves gRPC, and HTTP beside it, on one client listener's sockets until `stop`.
fn serve_client(
    config: &Config,
    services: &Services,
    incoming: BoxStream<'static, std::io::Result<ClientSocket>>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = Result<(), tonic::transport::Error>> + Send + 'static {
    let etcd = &services.etcd;
    let max_message = config.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let gateway =
        Arc::new(Gateway { services: Arc::clone(etcd), max_request_bytes: config.max_request_bytes });
    let http = crate::http::routes(services.http_state())
        .merge(crate::http::gateway::routes(gateway))
        .layer(axum::middleware::from_fn_with_state(Cors::new(&config.cors), cors::apply));
    let identity = services.store.identity.clone();
    // What every client request passes through, outermost first: the HTTP paths beside gRPC,
    // the gRPC metrics, a learner's refusals, Range backpressure, Range answers sent from their
    // encoded bytes.
    let layers = ServiceBuilder::new()
        .layer_fn(move |grpc| ClientHttp::new(grpc, http.clone()))
        .layer_fn(GrpcMetrics::new)
        .layer_fn(move |inner| LearnerGate::new(inner, identity.clone()))
        .layer_fn(|inner| RangeBackpressure::new(inner, ConnInfo::range_slots_of))
        .map_response(send_encoded);
    Server::builder()
        // HTTP/1.1 too: curl, probes and the JSON gateway speak it; gRPC needs HTTP/2 anyway.
        .accept_http1(true)
        .layer(layers)
        .tcp_nodelay(true)
        .add_routes(crate::grpc::api::routes(etcd, &services.require_leader, max_message))
        .serve_with_incoming_shutdown(incoming, stop)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
