//! The one place a membership changes: MemberAdd, MemberRemove, MemberUpdate, MemberPromote and
//! each member's own record go through [`Reconfigurer`], which takes one change at a time, on
//! the leader (a follower forwards it), checks it by etcd's rules ([`reconfig::check`]) and
//! makes it with openraft's membership API:
//!
//! ```text
//!  add learner      add_learner(id, node)                   one entry
//!  add voter        change_membership(AddVoters{id: node})  joint, then uniform
//!  remove           change_membership(RemoveVoters{id})     joint, then uniform (a learner:
//!                                                           RemoveNodes, one entry)
//!  promote          change_membership(AddVoterIds{id})      joint, then uniform
//!  update, publish  change_membership(SetNodes{id: node})   the voters stay as they are
//! ```
//!
//! openraft refuses a change while the previous one is uncommitted, and two changes proposed
//! at once could interleave; one lock here makes them one at a time, as etcd's are. A node's
//! record (SetNodes) changes only where it is dialed, never who votes: an id is one member's
//! for good, so no second quorum can form around a changed URL (openraft's warning is about
//! giving an address to another node).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use openraft::ChangeMembers;

use crate::network::peers::Peers;
use crate::reconfig::{self, Change, Health, Members, Progress, ReconfigError, Rules};
use crate::removed::Removed;
use crate::route::{write_refusal, Route};
use crate::types::MemberNode;
use actcd_store::StoreError;

/// How long a member waits before it asks again a leader that could not take a change yet.
const RETRY: Duration = Duration::from_millis(100);

/// Started once, the first time a member alone adds another: its peer listener (a member
/// alone takes no peer port, so that single members side by side need none of their own).
/// Its failure is the words MemberAdd's caller reads.
pub type Grow = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// What a membership change needs of the way to the other members: since when each has
/// answered without a break (etcd's health checks count on it), and the way to hand a change
/// to the leader. The peer transport is one; the test harness's in-memory network another.
pub trait ChangeLink: Send + Sync + 'static {
    /// Since when each peer has answered this member without a break.
    fn active_since(&self) -> BTreeMap<u64, Instant>;

    /// Has `leader` check and make `change`: the log index of the entry that completed it.
    fn reconfigure(
        &self,
        leader: (u64, MemberNode),
        change: &Change,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

impl ChangeLink for Peers {
    fn active_since(&self) -> BTreeMap<u64, Instant> {
        Peers::active_since(self)
    }

    fn reconfigure(
        &self,
        leader: (u64, MemberNode),
        change: &Change,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        Peers::reconfigure(self, leader, change)
    }
}

/// Makes membership changes, one at a time.
pub struct Reconfigurer<L: ChangeLink = Peers> {
    route: Route,
    peers: L,
    removed: Removed,
    rules: Rules,
    /// `--initial-cluster-token`, which a new member's id is derived from.
    token: String,
    one_at_a_time: tokio::sync::Mutex<()>,
    grow: Mutex<Option<Grow>>,
}

impl<L: ChangeLink> Reconfigurer<L> {
    /// Changes the membership of `route`'s Raft under `rules`, with `peers`' connection health
    /// and the `removed` ids; new member ids from `token`.
    pub fn new(route: Route, peers: L, removed: Removed, rules: Rules, token: String) -> Self {
        Self {
            route,
            peers,
            removed,
            rules,
            token,
            one_at_a_time: tokio::sync::Mutex::new(()),
            grow: Mutex::new(None),
        }
    }

    /// Runs `grow` before the first member is added to this member alone.
    pub fn on_grow(&self, grow: Grow) {
        *self.grow.lock().unwrap_or_else(|p| p.into_inner()) = Some(grow);
    }

    /// MemberAdd: a new member on `peer_urls` (already checked), its id derived as etcd
    /// derives it (the URLs, the cluster token and the time), then the change made. The new
    /// member's id.
    pub async fn add(&self, peer_urls: Vec<String>, learner: bool) -> Result<u64, StoreError> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let id = crate::cluster::initial_cluster::added_member_id(&peer_urls, &self.token, now);
        self.change(Change::Add { id, peer_urls, learner }).await?;
        Ok(id)
    }

    /// Has the leader make `change`, and waits until this member applied it, so that its own
    /// MemberList shows it. A leader that could not take it yet (none known, or it lost the
    /// leadership before it proposed anything) is asked again until the request timeout.
    pub async fn change(&self, change: Change) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + self.route.timeout();
        loop {
            let leader = self.route.leader().await?;
            let made = if leader.0 == self.route.member_id() {
                self.apply(change.clone()).await
            } else {
                self.peers.reconfigure(leader, &change).await
            };
            match made {
                Ok(index) => return self.route.wait_applied(index).await,
                Err(StoreError::Reconfig(ReconfigError::NotLeader) | StoreError::NoLeader)
                    if tokio::time::Instant::now() + RETRY < deadline =>
                {
                    tokio::time::sleep(RETRY).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Checks and makes `change` on this member, which must lead: the log index of the entry
    /// that completed it.
    pub async fn apply(&self, change: Change) -> Result<u64, StoreError> {
        let _one = self.one_at_a_time.lock().await;
        let me = self.route.member_id();
        let raft = self.route.raft();
        let (members, progress, applied) = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            if metrics.current_leader != Some(me) {
                return Err(StoreError::Reconfig(ReconfigError::NotLeader));
            }
            let members = Members::of(metrics.membership_config.membership(), self.removed.ids());
            let matched = metrics
                .replication
                .as_ref()
                .map(|r| r.iter().map(|(id, log)| (*id, log.map_or(0, |l| l.index))).collect())
                .unwrap_or_default();
            let progress = Progress { leader: metrics.last_log_index.unwrap_or(0), matched };
            (members, progress, metrics.last_applied.map_or(0, |l| l.index))
        };
        let known = members.nodes.get(&change.id()).cloned();
        let node = reconfig::changed_node(&change, known.as_ref());
        // A record published again as it is changes nothing.
        if matches!(change, Change::Publish { .. }) && node.is_some() && node == known {
            return Ok(applied);
        }
        let health = Health { me, active_since: self.peers.active_since(), now: Instant::now() };
        reconfig::check(&change, &members, self.rules, &health, &progress).map_err(StoreError::Reconfig)?;
        if matches!(change, Change::Add { .. }) {
            self.start_peer_listener()?;
        }
        let one = |id: u64| std::collections::BTreeSet::from([id]);
        let with_node = |id: u64| BTreeMap::from([(id, node.clone().unwrap_or_default())]);
        tracing::info!(?change, "changing the membership");
        let made = match &change {
            Change::Add { id, learner: true, .. } => {
                raft.add_learner(*id, node.clone().unwrap_or_default(), false).await
            }
            Change::Add { id, learner: false, .. } => {
                raft.change_membership(ChangeMembers::AddVoters(with_node(*id)), false).await
            }
            Change::Remove { id } if members.is_learner(*id) => {
                raft.change_membership(ChangeMembers::RemoveNodes(one(*id)), false).await
            }
            Change::Remove { id } => {
                raft.change_membership(ChangeMembers::RemoveVoters(one(*id)), false).await
            }
            Change::Promote { id } => {
                raft.change_membership(ChangeMembers::AddVoterIds(one(*id)), false).await
            }
            Change::Update { id, .. } | Change::Publish { id, .. } => {
                raft.change_membership(ChangeMembers::SetNodes(with_node(*id)), false).await
            }
        };
        let made = made.map_err(|e| write_refusal(&e))?;
        tracing::info!(?change, index = made.log_id.index, "membership changed");
        Ok(made.log_id.index)
    }

    fn start_peer_listener(&self) -> Result<(), StoreError> {
        let grow = self.grow.lock().unwrap_or_else(|p| p.into_inner()).take();
        match grow {
            Some(grow) => grow().map_err(|e| StoreError::Stopped(format!("cannot serve the peer URLs: {e}"))),
            None => Ok(()),
        }
    }
}

/// A member's record (name, client URLs) published into the membership once it runs, as etcd's
/// members publish theirs; retried until the membership holds it.
pub async fn publish(reconfigurer: Arc<Reconfigurer>, route: Route, record: MemberNode) {
    let me = route.member_id();
    loop {
        let known = {
            let metrics = route.raft().metrics();
            let metrics = metrics.borrow();
            metrics.membership_config.membership().get_node(&me).cloned()
        };
        if known.as_ref().is_some_and(|k| k.name == record.name && k.client_urls == record.client_urls) {
            return;
        }
        let change =
            Change::Publish { id: me, name: record.name.clone(), client_urls: record.client_urls.clone() };
        if let Err(err) = reconfigurer.change(change).await {
            tracing::debug!(%err, "cannot publish this member's record yet");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
