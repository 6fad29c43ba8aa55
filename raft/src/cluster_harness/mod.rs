//! An in-process cluster for tests: N members, each with the production log, state machine and
//! snapshot store on a RocksDB of its own in a temporary directory, its own openraft `Raft`
//! (with short heartbeats and election timeouts), [`Route`], [`ReadBarrier`] and [`Proposer`],
//! connected by an in-memory [`network::Network`] that can cut a member off. What a process
//! level test shows in seconds (forwarding, read barriers, elections, membership changes) runs
//! here in milliseconds; what only processes show (kill -9, real sockets, the kernel's
//! partitions) stays with the process level tests.
//!
//! Nothing of the server's edge runs here (it is in the server package): no gRPC, no lease
//! actor, no leadership follower. The membership changes are the server's own: each member's
//! [`Reconfigurer`], over the in-memory network.

mod history;
mod network;
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Config, Raft, SnapshotPolicy};
use tempfile::TempDir;

use crate::cluster::reconfigure::Reconfigurer;
use crate::log_store::LogStore;
use crate::proposer::{Proposer, DEFAULT_BATCH_LIMIT};
use crate::read_barrier::ReadBarrier;
use crate::reconfig::{Change, ReconfigError, Rules};
use crate::removed::Removed;
use crate::route::Route;
use crate::snapshot_store::SnapshotStore;
use crate::state_machine::{CoreHandle, StateMachine};
use crate::types::{MemberNode, TypeConfig};
use actcd_store::{Command, CommandResponse, ReadView, RocksEngine, StoreConfig, StoreCore, StoreError};
use network::{Link, Network};

/// Heartbeats every 50 ms, elections after 150 to 300 ms: a leader's loss costs about half a
/// second (openraft's followers first wait out the old leader's lease of 300 ms).
const HEARTBEAT_MS: u64 = 50;
const ELECTION_MS: (u64, u64) = (150, 300);

/// The log's segments: small, so that starting a member zero-fills little (etcd's 64 MiB
/// would take a core for a while per member), and a test's writes cross from one to the next.
const SEGMENT_BYTES: u64 = 256 << 10;

/// How long a request waits for a leader and its answer (the server's is 5 s and more): a
/// request on a cut-off member fails within a test's patience.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a test waits for something the cluster does by itself (an election, a catch-up).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Writes waiting in a member's Proposer channel, and reads in its read barrier's; when full,
/// the caller waits for room (the tests' few clients never fill them).
const MAILBOX: usize = 64;

/// The membership rules of a server started with etcd's defaults.
const RULES: Rules = Rules { strict: true, max_learners: 1 };

/// One member: its Raft and the production pieces around it.
pub struct Member {
    /// Its id (and openraft's node id).
    pub id: u64,
    /// Its Raft.
    pub raft: Raft<TypeConfig>,
    /// Its way to the leader.
    pub route: Route,
    /// Its linearizable reads.
    pub reads: ReadBarrier,
    /// Where its writes enter the log.
    pub writes: Proposer,
    /// What it applied, as its clients read it.
    pub view: ReadView<RocksEngine>,
    /// Its store core (the applied leases).
    pub core: CoreHandle,
    /// The ids its state machine knows were removed, itself included once it learns it.
    pub removed: Removed,
    /// Where its membership changes are made, or handed to the leader.
    reconfigurer: Arc<Reconfigurer<Link>>,
    /// Its data dir, removed with the member. RocksDB over tmpfs where there is one: the fsyncs
    /// cost nothing there, and nothing here outlives the process.
    _dir: TempDir,
}

impl Member {
    /// Starts member `id` on `net`, with an empty data dir: it waits for a leader to bring it
    /// the membership, unless it forms the cluster itself.
    async fn start(net: &Network, id: u64) -> Self {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }
            .expect("a temporary data dir");
        let engine = RocksEngine::open(&dir.path().join("db")).expect("rocksdb opens");
        let log = LogStore::open_with(&engine, Some(id), SEGMENT_BYTES).expect("the log opens");
        let core = StoreCore::open(engine, StoreConfig::default()).expect("the store opens");
        let view = core.read_view();
        let snapshots = SnapshotStore::open(dir.path().join("raft-snapshots")).expect("the snapshots open");
        let state_machine = StateMachine::new(core, snapshots.clone(), Vec::new())
            .expect("the state machine opens")
            .with_log(&log);
        let (core, removed) = (state_machine.core(), state_machine.removed());
        let config = Config {
            cluster_name: "harness".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_MS.0,
            election_timeout_max: ELECTION_MS.1,
            // As the server: snapshots when asked for (here by the tests), none by openraft's count.
            snapshot_policy: SnapshotPolicy::Never,
            // A snapshot lets the whole log go: a member added later must be sent the snapshot.
            max_in_snapshot_log_to_keep: 0,
            ..Config::default()
        };
        let config = Arc::new(config.validate().expect("a valid raft config"));
        let link = Link { net: net.clone(), from: id };
        let raft = Raft::new(id, config, link.clone(), log, state_machine).await.expect("raft starts");
        let route = Route::new(raft.clone(), id, Arc::new(link.clone()), REQUEST_TIMEOUT);
        // The tests choose the new members' ids: no token to derive them from.
        let reconfigurer =
            Arc::new(Reconfigurer::new(route.clone(), link, removed.clone(), RULES, String::new()));
        net.register(id, raft.clone(), route.clone(), removed.clone(), snapshots, Arc::clone(&reconfigurer));
        let reads = ReadBarrier::start(route.clone(), MAILBOX);
        let writes = Proposer::start(route.clone(), MAILBOX, DEFAULT_BATCH_LIMIT);
        Self { id, raft, route, reads, writes, view, core, removed, reconfigurer, _dir: dir }
    }

    /// Writes `command` through this member, as a client's write to it goes: its answer once
    /// applied here.
    pub async fn write(&self, command: Command) -> Result<CommandResponse, StoreError> {
        self.writes.write(command).await
    }

    /// The last log index this member applied.
    pub fn applied(&self) -> u64 {
        self.raft.metrics().borrow().last_applied.map_or(0, |id| id.index)
    }

    /// Whether the membership this member knows lists it.
    pub fn is_member(&self) -> bool {
        self.raft.metrics().borrow().membership_config.membership().get_node(&self.id).is_some()
    }

    /// The leader this member knows, if any.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }
}

/// The record of member `id` in the membership.
pub fn node(id: u64) -> MemberNode {
    MemberNode { name: format!("m{id}"), peer_urls: vec![format!("mem://m{id}")], client_urls: Vec::new() }
}

/// A cluster of members on one in-memory network.
pub struct Cluster {
    /// The network between the members.
    pub net: Network,
    members: BTreeMap<u64, Member>,
}

impl Cluster {
    /// Members 1 to `n`, which form a cluster and elect a leader.
    pub async fn start(n: u64) -> Self {
        let net = Network::default();
        let first: BTreeMap<u64, MemberNode> = (1..=n).map(|id| (id, node(id))).collect();
        let mut members = BTreeMap::new();
        for id in 1..=n {
            members.insert(id, Member::start(&net, id).await);
        }
        // One member forms the cluster, once all run, and wins its first campaign at once. The
        // server's members each form it (their processes start apart); started together here,
        // their campaigns would split the first vote and cost half a second.
        members[&1].raft.initialize(first).await.expect("the cluster forms");
        let cluster = Self { net, members };
        cluster.leader_among(&(1..=n).collect::<Vec<_>>()).await;
        cluster
    }

    /// Starts member `id` with an empty data dir and no cluster: it joins once the leader
    /// adds it.
    pub async fn start_joining(&mut self, id: u64) -> &Member {
        let member = Member::start(&self.net, id).await;
        self.members.entry(id).or_insert(member)
    }

    /// Member `id`.
    pub fn member(&self, id: u64) -> &Member {
        &self.members[&id]
    }

    /// Every member started.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// The leader that every member names, but those cut off, removed, or not members yet (a
    /// member started to join, before it is added), waiting for one up to [`PATIENCE`].
    pub async fn leader(&self) -> u64 {
        let removed: BTreeSet<u64> = self.members().flat_map(|m| m.removed.ids()).collect();
        let ids: Vec<u64> = self
            .members()
            .filter(|m| !self.net.is_cut_off(m.id) && !removed.contains(&m.id) && m.is_member())
            .map(|m| m.id)
            .collect();
        self.leader_among(&ids).await
    }

    /// The leader, one of `ids`, that every member of `ids` names, waiting up to [`PATIENCE`]
    /// (members that lost their leader name it until they elect another).
    pub async fn leader_among(&self, ids: &[u64]) -> u64 {
        assert!(!ids.is_empty(), "no member to name a leader");
        let deadline = Instant::now() + PATIENCE;
        loop {
            let named: BTreeSet<Option<u64>> = ids.iter().map(|id| self.member(*id).leader()).collect();
            if let [Some(leader)] = named.into_iter().collect::<Vec<_>>()[..] {
                if ids.contains(&leader) {
                    return leader;
                }
            }
            assert!(Instant::now() < deadline, "members {ids:?} agreed on no leader within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until every member of `ids` applied log index `index`.
    pub async fn applied_everywhere(&self, ids: &[u64], index: u64) {
        for id in ids {
            self.member(*id)
                .raft
                .wait(Some(PATIENCE))
                .applied_index_at_least(Some(index), "applied")
                .await
                .unwrap_or_else(|e| panic!("member {id} did not apply {index}: {e}"));
        }
    }

    /// Waits until every member of `ids` shows revision `revision` (the view moves in the
    /// apply, before any answer goes out; openraft's applied metrics follow a little later).
    pub async fn seen_everywhere(&self, ids: &[u64], revision: i64) {
        eventually(&format!("members {ids:?} at revision {revision}"), || {
            ids.iter().all(|id| self.member(*id).view.revision() >= revision)
        })
        .await;
    }

    /// Checks `change` by etcd's rules and makes it, on the leader's [`Reconfigurer`]: the log
    /// index of the entry that completed it.
    pub async fn reconfigure(&self, change: Change) -> Result<u64, StoreError> {
        self.member(self.leader().await).reconfigurer.apply(change).await
    }

    /// The refusal [`Cluster::reconfigure`] answers `change` with, if any.
    pub async fn refusal(&self, change: Change) -> Option<ReconfigError> {
        match self.reconfigure(change).await {
            Err(StoreError::Reconfig(err)) => Some(err),
            _ => None,
        }
    }
}

/// Polls `condition` every few milliseconds until it holds, failing the test with `what` after
/// [`PATIENCE`]: for what neither openraft's metrics nor a channel announce.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
