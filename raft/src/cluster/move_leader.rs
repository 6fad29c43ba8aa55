//! MoveLeader, and the hand-over of a leader stopped with SIGTERM, on openraft 0.9.
//!
//! openraft 0.9 has no leadership transfer (0.10 has `Trigger::transfer_leader`; its only
//! release on the registry here is an alpha, and moving to it means a new storage and network
//! API). What 0.9 does have is enough for Raft's own transfer protocol, with one difference:
//! its followers refuse to vote while their leader lease (openraft's max election timeout,
//! 0.6 of `--election-timeout` here) lasts. So the leader:
//!
//! ```text
//!  1. holds its proposals and read index rounds (Route::hold);
//!  2. waits until the transferee's log matches its own (heartbeats still going);
//!  3. stops its heartbeats: from now (t) no follower hears from it;
//!  4. waits out the lease from t, and a margin for a message still in flight;
//!  5. asks the transferee to campaign now (TimeoutNow): its log is the longest and the
//!     others' leases have run out, so it wins before any follower's own election timer
//!     fires (0.9 to 1.2 election timeouts after the last heartbeat, which was at most a
//!     heartbeat before t: see start::election_window);
//!  6. waits until the transferee leads, then lets the held work go (to the new leader).
//! ```
//!
//! Writes pause from 1 to 6: about 0.7 election timeouts with etcd's default flags, less than
//! the election timeout a leader's death costs. As etcd's raft does, the leader gives up after
//! one election timeout (the transferee is down, or too far behind) and takes writes again;
//! MoveLeader itself waits for the transferee to lead until the client's deadline, then
//! answers etcd's "leader transfer took too long". Every step is Raft's ordinary vote, so a
//! transfer that fails (the transferee dies) costs an ordinary election, never safety. With two
//! voters the transferee needs the leader's own vote, which openraft refuses within its lease:
//! there the transfer waits for the transferee's second campaign, or times out.

use std::time::Duration;

use crate::reconfig::ReconfigError;
use crate::route::Route;
use actcd_store::StoreError;

use crate::network::peers::Peers;

/// How often the leader looks at the transferee's progress and the new leadership.
const POLL: Duration = Duration::from_millis(10);

/// Moves the leadership of this member's cluster.
#[derive(Clone)]
pub struct LeaderMover {
    route: Route,
    peers: Peers,
    /// openraft's leader lease: a follower refuses votes this long after its leader's last message.
    lease: Duration,
    /// Waited past the lease for a message still in flight: half a heartbeat.
    margin: Duration,
    /// The longest a hand-over holds the leader's work (etcd's raft: one election timeout).
    abort: Duration,
}

impl LeaderMover {
    /// Moves `route`'s leadership over `peers`; followers hold a lease of `lease` and hear a
    /// heartbeat every `heartbeat`; a hand-over is given up after `election` (the election
    /// timeout).
    pub fn new(route: Route, peers: Peers, lease: Duration, heartbeat: Duration, election: Duration) -> Self {
        Self { route, peers, lease, margin: (heartbeat / 2).max(POLL * 2), abort: election }
    }

    /// Hands this member's leadership to voter `target`, within `within`.
    pub async fn move_to(&self, target: u64, within: Duration) -> Result<(), StoreError> {
        let me = self.route.member_id();
        let raft = self.route.raft();
        let node = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            if metrics.current_leader != Some(me) {
                return Err(StoreError::Reconfig(ReconfigError::NotLeader));
            }
            let membership = metrics.membership_config.membership();
            match membership.get_node(&target) {
                Some(node) if membership.voter_ids().any(|v| v == target) => node.clone(),
                _ => return Err(StoreError::Reconfig(ReconfigError::BadTransferee)),
            }
        };
        if target == me {
            return Ok(());
        }
        tracing::info!(target = %format!("{target:x}"), "moving the leadership");
        let deadline = tokio::time::Instant::now() + within;
        self.route.hold(true);
        let moved = tokio::time::timeout(within.min(self.abort), self.hand_over(target, node)).await;
        raft.runtime_config().heartbeat(true);
        self.route.hold(false);
        if moved.is_err() {
            // Info: the caller of MoveLeader learns the outcome from its answer.
            tracing::info!(target = %format!("{target:x}"), "leadership transfer aborted: taking writes again");
        }
        // The transferee may still win its campaign: wait for it until the deadline.
        while raft.metrics().borrow().current_leader != Some(target) {
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::Reconfig(ReconfigError::TransferTimeout));
            }
            tokio::time::sleep(POLL).await;
        }
        tracing::info!(target = %format!("{target:x}"), "leadership moved");
        Ok(())
    }

    /// Steps 2 to 6; a transferee that cannot be reached is waited for like one that loses.
    async fn hand_over(&self, target: u64, node: crate::types::MemberNode) {
        let raft = self.route.raft();
        // 2: the transferee's log matches the leader's.
        loop {
            let caught_up = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow();
                let last = metrics.last_log_index;
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&target).copied().flatten())
                    .map(|l| l.index);
                last.is_some() && matched == last
            };
            if caught_up {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        // 3 and 4: no follower still holds the lease.
        raft.runtime_config().heartbeat(false);
        tokio::time::sleep(self.lease + self.margin).await;
        // 5 and 6.
        if let Err(err) = self.peers.timeout_now((target, node)).await {
            tracing::info!(target = %format!("{target:x}"), %err, "the transferee did not take the campaign");
        }
        while raft.metrics().borrow().current_leader != Some(target) {
            tokio::time::sleep(POLL).await;
        }
    }

    /// On SIGTERM: hands the leadership to the voter that matched the most of the log and has
    /// been connected the longest, as etcd's leader does before it stops; a member that does
    /// not lead, or leads alone, has nothing to hand over.
    pub async fn on_shutdown(&self, within: Duration) {
        let me = self.route.member_id();
        let target = {
            let metrics = self.route.raft().metrics();
            let metrics = metrics.borrow();
            if metrics.current_leader != Some(me) {
                return;
            }
            let active = self.peers.active_since();
            let matched = metrics.replication.clone().unwrap_or_default();
            metrics
                .membership_config
                .membership()
                .voter_ids()
                .filter(|v| *v != me)
                .filter_map(|v| active.get(&v).map(|since| (v, *since)))
                .max_by_key(|(v, since)| {
                    (matched.get(v).copied().flatten().map(|l| l.index), std::cmp::Reverse(*since))
                })
                .map(|(v, _)| v)
        };
        let Some(target) = target else {
            return;
        };
        if let Err(err) = self.move_to(target, within).await {
            // Info: the members elect a leader after one election timeout, as etcd's do.
            tracing::info!(%err, "could not hand the leadership over before stopping");
        }
    }
}
