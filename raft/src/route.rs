//! Where a write or a linearizable read goes: to this member's Raft when it leads, to the
//! leader over the peer transport when another member does.
//!
//! ```text
//!  write batch ──► leader? ── this member ──► client_write ──────────────► answers
//!                     │
//!                     └─ member L ──► L proposes it (Propose) ─► answers + log index
//!                                          wait until this member applied that index ─┘
//!
//!  linearizable read ──► leader? ── this member ──► read index (a heartbeat round)
//!                           └─ member L ──► L's read index (ReadIndex)
//!                               then wait until this member applied that far, and read here
//! ```
//!
//! A forwarded write is answered after this member applied it too, as etcd answers a write
//! on the member that took it: a client that wrote through a follower and then reads that
//! follower serializably sees its write. Without a leader a request waits for one, up to the
//! request timeout (etcd's: 5 s plus two election timeouts), then fails as etcd's does.
//!
//! While a leader hands its leadership over (MoveLeader, SIGTERM) it holds new proposals and
//! read index rounds ([`Route::hold`]), its own and the ones followers forwarded; once the
//! transfer ends they go to whoever leads then, so a client sees a pause, not an error.
//!
//! A call forwarded to a leader that another has replaced since is given up after a grace
//! ([`Route::leader_gone`]): a leader cut off from its peers answers nobody (the call waits
//! for a TCP connection that neither fails nor delivers), and the Proposer's few proposals in
//! flight would otherwise hold every later write of this member for the whole request timeout
//! (seen in a netns partition test: the majority wrote again 6 s after the cut instead of
//! 1 s). A write given up answers "leader changed" (its outcome is unknown, as a timeout's
//! is); a read index is asked again of the new leader. The grace lets a leader that handed
//! over (MoveLeader, SIGTERM) answer what it still holds, so a hand-over stays an error-free
//! pause.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::metrics::WaitError;
use openraft::Raft;
use serde::{Deserialize, Serialize};

use super::types::{Applied, MemberNode, Proposal, TypeConfig};
use actcd_store::StoreError;

/// etcd refuses proposals while the applied index trails the committed one by more than this
/// (its `maxGapBetweenApplyAndCommitIndex`).
pub const MAX_APPLY_GAP: u64 = 5000;

/// What the leader answers a forwarded batch with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forwarded {
    /// The log index of the entry that carried the batch.
    pub log_index: u64,
    /// The answers, in the batch's order.
    pub applied: Applied,
}

/// The calls a follower makes to its leader. The peer transport implements it; `leader` is
/// the leader's record in the membership, which names its peer URLs. A call the leader surely
/// never received (it could not be connected to) fails with [`LinkError::NotSent`], and is
/// tried again once there is a leader to take it.
pub trait LeaderLink: Send + Sync + 'static {
    /// Has the leader propose `proposal` and answers with what it applied. The proposal is
    /// encoded before the call returns, so that a retry can send it again.
    fn propose(
        &self,
        leader: (u64, MemberNode),
        proposal: &Proposal,
    ) -> BoxFuture<'static, Result<Forwarded, LinkError>>;

    /// The leader's read index: a log index every write acknowledged before the call is at
    /// or below.
    fn read_index(&self, leader: (u64, MemberNode)) -> BoxFuture<'static, Result<u64, LinkError>>;
}

/// How a call to the leader failed.
#[derive(Debug)]
pub enum LinkError {
    /// The leader could not be reached: it never got the call.
    NotSent,
    /// The leader answered with this error, or the call broke off after it was sent.
    Failed(StoreError),
}

impl LinkError {
    /// The error of a call that its caller does not try again: one never sent found no leader
    /// to take it.
    pub fn into_store_error(self) -> StoreError {
        match self {
            Self::NotSent => StoreError::NoLeader,
            Self::Failed(err) => err,
        }
    }
}

/// How long a member waits before it retries a call the leader could not take: about a
/// heartbeat, the time a new leader needs to make itself known once elected.
const RETRY: Duration = Duration::from_millis(100);

/// This member's way to its leader.
#[derive(Clone)]
pub struct Route {
    raft: Raft<TypeConfig>,
    me: u64,
    link: Arc<dyn LeaderLink>,
    timeout: Duration,
    /// Set while this leader hands its leadership over (MoveLeader): proposals and read
    /// index rounds wait, so that nothing renews the followers' leader lease, then go to
    /// whoever leads after it.
    handing_over: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Route {
    /// Routes for member `me` through `raft`, forwarding over `link`; a request waits at most
    /// `timeout` for a leader and for its answer.
    pub fn new(raft: Raft<TypeConfig>, me: u64, link: Arc<dyn LeaderLink>, timeout: Duration) -> Self {
        Self { raft, me, link, timeout, handing_over: Arc::new(tokio::sync::watch::Sender::new(false)) }
    }

    /// Holds (true) or lets go (false) this leader's proposals and read index rounds, while
    /// it hands its leadership over.
    pub fn hold(&self, held: bool) {
        self.handing_over.send_replace(held);
    }

    /// Whether a hand-over holds this member's leader work now.
    pub fn is_held(&self) -> bool {
        *self.handing_over.borrow()
    }

    /// Waits while a hand-over holds this member's leader work, up to `deadline`.
    async fn while_held(&self, deadline: tokio::time::Instant) -> Result<(), StoreError> {
        // The write path's usual case: nothing held, no subscription made.
        if !*self.handing_over.borrow() {
            return Ok(());
        }
        let mut held = self.handing_over.subscribe();
        let released = tokio::time::timeout_at(deadline, held.wait_for(|h| !*h)).await.is_ok();
        if released {
            Ok(())
        } else {
            Err(StoreError::Timeout)
        }
    }

    /// The Raft this member runs.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// This member's id.
    pub fn member_id(&self) -> u64 {
        self.me
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether this member is the only voter: then everything acknowledged is applied here
    /// and a read needs no round.
    pub fn alone(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let mut voters = metrics.membership_config.voter_ids();
        voters.next() == Some(self.me) && voters.next().is_none()
    }

    /// The leader and its record, waiting up to the request timeout for one.
    pub async fn leader(&self) -> Result<(u64, MemberNode), StoreError> {
        let wait = self.raft.wait(Some(self.timeout));
        let metrics =
            wait.metrics(|m| m.current_leader.is_some(), "a leader").await.map_err(|e| match e {
                WaitError::Timeout(..) => StoreError::Timeout,
                WaitError::ShuttingDown => StoreError::Stopped("raft stopped".into()),
            })?;
        let leader = metrics.current_leader.ok_or(StoreError::NoLeader)?;
        let node = metrics.membership_config.membership().get_node(&leader).cloned().unwrap_or_default();
        Ok((leader, node))
    }

    /// Commits `proposal` through the leader; its answers once this member applied it.
    pub async fn propose(&self, proposal: Proposal) -> Result<Applied, StoreError> {
        self.propose_indexed(proposal).await.map(|f| f.applied)
    }

    /// [`Route::propose`], with the log index of the entry that carried it.
    async fn propose_indexed(&self, proposal: Proposal) -> Result<Forwarded, StoreError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            self.while_held(deadline).await?;
            let leader = self.leader().await?;
            if leader.0 == self.me {
                return self.propose_here(proposal).await;
            }
            let to = leader.0;
            let answer = tokio::select! {
                answer = tokio::time::timeout_at(deadline, self.link.propose(leader, &proposal)) => answer,
                () = self.leader_gone(to) => return Err(StoreError::LeaderChanged),
            };
            match answer {
                Ok(Ok(forwarded)) => {
                    self.wait_applied(forwarded.log_index).await?;
                    return Ok(forwarded);
                }
                Ok(Err(LinkError::Failed(err))) => return Err(err),
                Ok(Err(LinkError::NotSent)) if tokio::time::Instant::now() + RETRY < deadline => {
                    tokio::time::sleep(RETRY).await;
                }
                Ok(Err(LinkError::NotSent)) | Err(_) => return Err(StoreError::Timeout),
            }
        }
    }

    /// Proposes `proposal` on this member, which a follower believed leads. One that handed
    /// its leadership over meanwhile sends it on to the new leader.
    pub async fn propose_forwarded(&self, proposal: Proposal) -> Result<Forwarded, StoreError> {
        self.while_held(tokio::time::Instant::now() + self.timeout).await?;
        if self.raft.metrics().borrow().current_leader == Some(self.me) {
            self.propose_here(proposal).await
        } else {
            self.propose_indexed(proposal).await
        }
    }

    /// Proposes `proposal` on this member only, which believes it leads (its lessor's revokes,
    /// never forwarded).
    pub async fn propose_as_leader(&self, proposal: Proposal) -> Result<Forwarded, StoreError> {
        self.while_held(tokio::time::Instant::now() + self.timeout).await?;
        self.propose_here(proposal).await
    }

    /// Proposes `proposal` on this member, which believes it leads. Refused with "too many
    /// requests" when apply trails the log too far.
    async fn propose_here(&self, proposal: Proposal) -> Result<Forwarded, StoreError> {
        {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            let applied = metrics.last_applied.map_or(0, |id| id.index);
            if metrics.last_log_index.unwrap_or(0).saturating_sub(applied) > MAX_APPLY_GAP {
                return Err(StoreError::TooManyRequests);
            }
        }
        match tokio::time::timeout(self.timeout, self.raft.client_write(proposal)).await {
            Ok(Ok(written)) => Ok(Forwarded { log_index: written.log_id.index, applied: written.data }),
            Ok(Err(err)) => Err(write_refusal(&err)),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Waits until every write acknowledged before this call is applied on this member.
    pub async fn read_barrier(&self) -> Result<(), StoreError> {
        if self.alone() {
            return Ok(());
        }
        let index = self.read_index().await?;
        self.wait_applied(index).await
    }

    /// The leader's read index, wherever it leads.
    async fn read_index(&self) -> Result<u64, StoreError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            self.while_held(deadline).await?;
            let leader = self.leader().await?;
            if leader.0 == self.me {
                return self.read_index_here().await;
            }
            let to = leader.0;
            let answer = tokio::select! {
                answer = tokio::time::timeout_at(deadline, self.link.read_index(leader)) => answer,
                // Nothing was changed by asking: ask whoever leads now, within the deadline.
                () = self.leader_gone(to) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(StoreError::Timeout);
                    }
                    continue;
                }
            };
            match answer {
                Ok(Ok(index)) => return Ok(index),
                Ok(Err(LinkError::Failed(err))) => return Err(err),
                Ok(Err(LinkError::NotSent)) if tokio::time::Instant::now() + RETRY < deadline => {
                    tokio::time::sleep(RETRY).await;
                }
                Ok(Err(LinkError::NotSent)) | Err(_) => return Err(StoreError::Timeout),
            }
        }
    }

    /// The read index of this member, which a follower believed leads; one that handed its
    /// leadership over meanwhile asks the new leader.
    pub async fn read_index_forwarded(&self) -> Result<u64, StoreError> {
        self.while_held(tokio::time::Instant::now() + self.timeout).await?;
        if self.raft.metrics().borrow().current_leader == Some(self.me) {
            self.read_index_here().await
        } else {
            self.read_index().await
        }
    }

    /// The read index of this member only, as leader (for its lessor: a member that does not
    /// lead fails).
    pub async fn read_index_as_leader(&self) -> Result<u64, StoreError> {
        self.while_held(tokio::time::Instant::now() + self.timeout).await?;
        self.read_index_here().await
    }

    /// The read index of this member as leader: confirmed by a quorum's heartbeat answers.
    async fn read_index_here(&self) -> Result<u64, StoreError> {
        match tokio::time::timeout(self.timeout, self.raft.get_read_log_id()).await {
            Ok(Ok((read, _applied))) => Ok(read.map_or(0, |id| id.index)),
            Ok(Err(err)) => Err(read_refusal(&err)),
            Err(_) => Err(StoreError::Timeout),
        }
    }

    /// Resolves a grace after this member stopped naming `leader` as its leader (it names
    /// another, or none during an election); never while it still does. The grace is
    /// openraft's longest election timeout: a leader that handed over answers well within it.
    async fn leader_gone(&self, leader: u64) {
        let grace = Duration::from_millis(self.raft.config().election_timeout_max);
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_and_update().current_leader != Some(leader) {
                break;
            }
            if metrics.changed().await.is_err() {
                // Raft stopped: the call's own deadline ends it.
                return std::future::pending().await;
            }
        }
        tokio::time::sleep(grace).await;
    }

    /// Waits until this member applied log index `index`.
    pub async fn wait_applied(&self, index: u64) -> Result<(), StoreError> {
        let wait = self.raft.wait(Some(self.timeout));
        match wait.applied_index_at_least(Some(index), "applied").await {
            Ok(_) => Ok(()),
            Err(WaitError::Timeout(..)) => Err(StoreError::Timeout),
            Err(WaitError::ShuttingDown) => Err(StoreError::Stopped("raft stopped".into())),
        }
    }
}

/// What a proposal openraft did not commit answers its writes.
pub fn write_refusal(err: &RaftError<u64, ClientWriteError<u64, MemberNode>>) -> StoreError {
    match err {
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) if forward.leader_id.is_none() => {
            StoreError::NoLeader
        }
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => StoreError::LeaderChanged,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => StoreError::Stopped(e.to_string()),
        RaftError::Fatal(fatal) => StoreError::Stopped(fatal.to_string()),
    }
}

/// What a read index openraft did not confirm answers.
fn read_refusal(err: &RaftError<u64, CheckIsLeaderError<u64, MemberNode>>) -> StoreError {
    match err {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)) if forward.leader_id.is_none() => {
            StoreError::NoLeader
        }
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)) => StoreError::LeaderChanged,
        // No quorum answered the heartbeats: the leader cannot tell it still leads.
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)) => StoreError::Timeout,
        RaftError::Fatal(fatal) => StoreError::Stopped(fatal.to_string()),
    }
}
