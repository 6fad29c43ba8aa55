//! The in-memory network between the harness's members: openraft's messages (append, vote,
//! full snapshot), a follower's calls to its leader ([`LeaderLink`]) and the membership changes
//! it hands the leader ([`ChangeLink`]) delivered to the target member's `Raft`, `Route` and
//! `Reconfigurer` directly, each message through the same postcard encoding as the peer
//! transport's frames, so that what a member receives is what it would read off the wire.
//!
//! A member can be cut off ([`Network::cut`]): every message to or from it, and every answer
//! to a message it sent before, is held for good, as a partition holds them (the sender's own
//! timeout ends the wait, as it does over TCP). The Raft messages to a member can be held
//! ([`Network::hold`]) and let go later, so that it falls behind while its own calls go on. A
//! member that was removed from the cluster is
//! refused by its peers with etcd's words and learns it was removed, as the peer service and
//! the peer transport do it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use futures::future::BoxFuture;
use openraft::error::{Fatal, NetworkError, RPCError, RaftError, RemoteError, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::SnapshotResponse;
use openraft::{Raft, Snapshot, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use crate::cluster::reconfigure::{ChangeLink, Reconfigurer};
use crate::reconfig::{Change, HEALTH_INTERVAL};
use crate::removed::{Removed, REMOVED_TEXT};
use crate::route::{Forwarded, LeaderLink, LinkError, Route};
use crate::snapshot_store::SnapshotStore;
use crate::types::{decode, encode, MemberNode, Proposal, SnapshotFiles, TypeConfig};
use actcd_store::StoreError;

/// Why a message was not delivered (a cut-off member's messages are not refused: they wait).
#[derive(Debug, thiserror::Error)]
pub enum Undelivered {
    /// No member of that id runs.
    #[error("member {0} is not running")]
    Absent(u64),
    /// The sender was removed from the cluster: its peers refuse it.
    #[error("{REMOVED_TEXT}")]
    Removed,
    /// A message or its answer did not survive the encoding.
    #[error("cannot encode or decode a peer message: {0}")]
    Wire(#[from] postcard::Error),
    /// Copying a snapshot's files to the receiver failed.
    #[error("cannot copy a snapshot: {0}")]
    Copy(#[from] std::io::Error),
    /// The snapshot's copy lacks its meta file: it is not the snapshot the header names.
    #[error("snapshot {0} arrived incomplete")]
    Incomplete(String),
}

/// What one member offers the others.
#[derive(Clone)]
struct Endpoint {
    raft: Raft<TypeConfig>,
    route: Route,
    removed: Removed,
    snapshots: SnapshotStore,
    reconfigurer: Arc<Reconfigurer<Link>>,
}

#[derive(Default)]
struct State {
    members: BTreeMap<u64, Endpoint>,
    cut: BTreeSet<u64>,
    /// Since when each member's messages to each other member have been answered without a
    /// break (the peer transport's ActiveSince), by (from, to).
    active_since: BTreeMap<(u64, u64), Instant>,
    /// Proposals each member forwarded to a leader.
    forwarded: BTreeMap<u64, u64>,
}

/// The network of one harness cluster. Clones share it.
#[derive(Clone, Default)]
pub struct Network {
    state: Arc<Mutex<State>>,
    /// The members whose Raft messages wait at the door (see [`Network::hold`]); a watch, so
    /// that the held messages go on when it changes.
    held: Arc<watch::Sender<BTreeSet<u64>>>,
}

impl Network {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plain maps, each change made whole: still right after a panicking test thread.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes member `id` reachable.
    pub(super) fn register(
        &self,
        id: u64,
        raft: Raft<TypeConfig>,
        route: Route,
        removed: Removed,
        snapshots: SnapshotStore,
        reconfigurer: Arc<Reconfigurer<Link>>,
    ) {
        self.state().members.insert(id, Endpoint { raft, route, removed, snapshots, reconfigurer });
    }

    /// Cuts member `id` off: from now on nothing reaches it or leaves it.
    pub fn cut(&self, id: u64) {
        let mut state = self.state();
        state.cut.insert(id);
        state.active_since.retain(|(from, to), _| *from != id && *to != id);
    }

    /// Lets member `id`'s messages through again.
    pub fn heal(&self, id: u64) {
        self.state().cut.remove(&id);
    }

    /// Holds the Raft messages to member `id` (appends, votes, snapshots) until
    /// [`Network::release`]: it falls behind the log, while its own calls to the leader go on.
    /// openraft gives up on a held message after its timeout and sends it again.
    pub fn hold(&self, id: u64) {
        self.held.send_modify(|held| {
            held.insert(id);
        });
    }

    /// Lets the held Raft messages to member `id` through.
    pub fn release(&self, id: u64) {
        self.held.send_modify(|held| {
            held.remove(&id);
        });
    }

    /// Waits while the Raft messages to member `to` are held.
    async fn unheld(&self, to: u64) {
        // The sender lives in `self`: the wait ends only by a release.
        let _ = self.held.subscribe().wait_for(|held| !held.contains(&to)).await;
    }

    /// Since when each peer has answered member `me` without a break.
    pub fn active_since(&self, me: u64) -> BTreeMap<u64, Instant> {
        self.state()
            .active_since
            .iter()
            .filter(|((from, _), _)| *from == me)
            .map(|((_, to), t)| (*to, *t))
            .collect()
    }

    /// How many proposals member `id` forwarded to a leader.
    pub fn forwarded(&self, id: u64) -> u64 {
        self.state().forwarded.get(&id).copied().unwrap_or(0)
    }

    /// Whether member `id` is cut off.
    pub fn is_cut_off(&self, id: u64) -> bool {
        self.state().cut.contains(&id)
    }

    fn is_cut(&self, from: u64, to: u64) -> bool {
        let state = self.state();
        state.cut.contains(&from) || state.cut.contains(&to)
    }

    /// The endpoint of `to` for a message of `from`: waits for good while either is cut off.
    async fn reach(&self, from: u64, to: u64) -> Result<Endpoint, Undelivered> {
        let target = {
            let state = self.state();
            if state.cut.contains(&from) || state.cut.contains(&to) {
                None
            } else {
                Some(state.members.get(&to).cloned().ok_or(Undelivered::Absent(to))?)
            }
        };
        let Some(target) = target else { return std::future::pending().await };
        if target.removed.contains(from) {
            // As the peer transport hears the refusal: the sender learns it was removed.
            if let Some(sender) = self.state().members.get(&from) {
                sender.removed.mark(from);
            }
            return Err(Undelivered::Removed);
        }
        Ok(target)
    }

    /// The way back for an answer to `from`: lost for good if either side was cut off
    /// meanwhile.
    async fn answer_back(&self, from: u64, to: u64) {
        if self.is_cut(from, to) {
            std::future::pending::<()>().await;
        }
        self.state().active_since.entry((from, to)).or_insert_with(Instant::now);
    }
}

/// `value` as the peer receiving it decodes it.
fn wire<T: Serialize + DeserializeOwned>(value: &T) -> Result<T, Undelivered> {
    Ok(decode(&encode(value)?)?)
}

/// Member `from`'s side of the network: openraft's client factory, and the way to the leader.
#[derive(Clone)]
pub struct Link {
    pub(super) net: Network,
    pub(super) from: u64,
}

impl RaftNetworkFactory<TypeConfig> for Link {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &MemberNode) -> PeerLink {
        PeerLink { link: self.clone(), target, node: node.clone() }
    }
}

/// Member `link.from`'s connection to member `target`.
pub struct PeerLink {
    link: Link,
    target: u64,
    node: MemberNode,
}

type RpcError = RPCError<u64, MemberNode, RaftError<u64>>;

impl PeerLink {
    fn undelivered(err: Undelivered) -> RpcError {
        match err {
            // As a peer that is down: openraft backs off before it tries again.
            Undelivered::Absent(_) => RPCError::Unreachable(Unreachable::new(&err)),
            _ => RPCError::Network(NetworkError::new(&err)),
        }
    }

    /// Delivers `request` to the target's Raft through `call`, and its answer back.
    async fn unary<Req, Resp, Call, Fut>(
        &mut self,
        request: &Req,
        _option: &RPCOption,
        call: Call,
    ) -> Result<Resp, RpcError>
    where
        Req: Serialize + DeserializeOwned,
        Resp: Serialize + DeserializeOwned,
        Call: FnOnce(Raft<TypeConfig>, Req) -> Fut,
        Fut: Future<Output = Result<Resp, RaftError<u64>>>,
    {
        let (from, to) = (self.link.from, self.target);
        self.link.net.unheld(to).await;
        let target = self.link.net.reach(from, to).await.map_err(Self::undelivered)?;
        let request = wire(request).map_err(Self::undelivered)?;
        let answer = call(target.raft, request).await;
        self.link.net.answer_back(from, to).await;
        let answer = wire(&answer).map_err(Self::undelivered)?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(to, self.node.clone(), e)))
    }

    /// [`PeerLink::deliver_snapshot`], its failure as openraft's.
    async fn send_snapshot(
        &self,
        vote: Vote<u64>,
        snapshot: Snapshot<TypeConfig>,
    ) -> Result<Result<SnapshotResponse<u64>, Fatal<u64>>, StreamingError<TypeConfig, Fatal<u64>>> {
        self.deliver_snapshot(vote, snapshot).await.map_err(|err| match err {
            Undelivered::Absent(_) => StreamingError::Unreachable(Unreachable::new(&err)),
            _ => StreamingError::Network(NetworkError::new(&err)),
        })
    }

    /// Copies the snapshot's checkpoint to a directory of the target's, as the peer service
    /// unpacks a streamed one, and has the target install it.
    async fn deliver_snapshot(
        &self,
        vote: Vote<u64>,
        snapshot: Snapshot<TypeConfig>,
    ) -> Result<Result<SnapshotResponse<u64>, Fatal<u64>>, Undelivered> {
        let (from, to) = (self.link.from, self.target);
        self.link.net.unheld(to).await;
        let target = self.link.net.reach(from, to).await?;
        let (vote, meta) = wire(&(vote, snapshot.meta))?;
        let dir = target.snapshots.receiving_dir();
        let (source, copy) = (snapshot.snapshot.dir.clone(), dir.clone());
        tokio::task::spawn_blocking(move || copy_dir(&source, &copy))
            .await
            .map_err(|e| Undelivered::Copy(std::io::Error::other(e)))??;
        if !SnapshotStore::is_complete(&dir, &meta) {
            return Err(Undelivered::Incomplete(meta.snapshot_id));
        }
        let snapshot = Snapshot { meta, snapshot: Box::new(SnapshotFiles::unheld(dir)) };
        let answer = target.raft.install_full_snapshot(vote, snapshot).await;
        self.link.net.answer_back(from, to).await;
        wire(&answer)
    }
}

/// Copies the files of checkpoint `from` (a flat directory) into a new directory `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

crate::network::raft_network!(PeerLink);

impl Link {
    /// A call to the leader through `call` on its endpoint, the answer back to this member.
    fn to_leader<T, Call, Fut>(&self, leader: u64, call: Call) -> BoxFuture<'static, Result<T, LinkError>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        Call: FnOnce(Endpoint) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send,
    {
        let (net, from) = (self.net.clone(), self.from);
        Box::pin(async move {
            let failed = |e: Undelivered| LinkError::Failed(StoreError::Stopped(e.to_string()));
            let target = match net.reach(from, leader).await {
                Ok(target) => target,
                // Nobody took it: asked again once there is a leader.
                Err(Undelivered::Absent(_)) => return Err(LinkError::NotSent),
                Err(err) => return Err(failed(err)),
            };
            let answer = call(target).await;
            net.answer_back(from, leader).await;
            wire(&answer).map_err(failed)?.map_err(LinkError::Failed)
        })
    }
}

impl LeaderLink for Link {
    fn propose(
        &self,
        leader: (u64, MemberNode),
        proposal: &Proposal,
    ) -> BoxFuture<'static, Result<Forwarded, LinkError>> {
        // Encoded now, as the peer transport does: the caller may send it again.
        let proposal = wire(proposal);
        *self.net.state().forwarded.entry(self.from).or_default() += 1;
        self.to_leader(leader.0, async move |target| {
            let proposal = proposal.map_err(|e| StoreError::Stopped(e.to_string()))?;
            target.route.propose_forwarded(proposal).await
        })
    }

    fn read_index(&self, leader: (u64, MemberNode)) -> BoxFuture<'static, Result<u64, LinkError>> {
        self.to_leader(leader.0, async |target| target.route.read_index_forwarded().await)
    }
}

impl ChangeLink for Link {
    /// Each peer's ActiveSince, taken [`HEALTH_INTERVAL`] earlier than it began: a peer that
    /// answers counts as healthy at once, and the tests need not wait five seconds for it; one
    /// that does not answer is unhealthy all the same.
    fn active_since(&self) -> BTreeMap<u64, Instant> {
        let since = self.net.active_since(self.from);
        since.into_iter().map(|(id, t)| (id, t.checked_sub(HEALTH_INTERVAL).unwrap_or(t))).collect()
    }

    fn reconfigure(
        &self,
        leader: (u64, MemberNode),
        change: &Change,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let change = wire(change);
        let asked = self.to_leader(leader.0, async move |target| {
            let change = change.map_err(|e| StoreError::Stopped(e.to_string()))?;
            target.reconfigurer.apply(change).await
        });
        async move { asked.await.map_err(LinkError::into_store_error) }
    }
}
