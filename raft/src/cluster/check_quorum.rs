//! etcd's CheckQuorum (always on in etcd 3.4's server): a leader that has heard from no quorum
//! of voters for an election timeout steps down. Cut off from its peers, it would otherwise go
//! on naming itself leader: its clients wait a request timeout for an error where etcd's get
//! "no leader" after an election timeout, and it keeps counting down leases it can no longer
//! renew or revoke.
//!
//! openraft 0.9 has no such check and no call to step down. It reports how long ago a quorum
//! last acknowledged the leader (`millis_since_quorum_ack`), and a leader whose own vote is older
//! than its lease takes a vote request of a higher term with a log as long as its own as a
//! reason to follow (the way MoveLeader's transferee takes over). So the leader sends itself
//! one: the next term, for [`NOBODY`], no member's id (etcd's ids are never 0). It then follows
//! no one and campaigns at its election timeout, as a cut-off etcd 3.4 member does.

use std::time::Duration;

use crate::route::Route;
use openraft::raft::VoteRequest;
use openraft::{ServerState, Vote};

/// The member a stepping-down leader votes for: none.
pub const NOBODY: u64 = 0;

/// Checks every `heartbeat` while this member leads, until the process ends.
pub async fn run(route: Route, heartbeat: Duration, election_timeout: Duration) {
    let raft = route.raft().clone();
    let mut ticks = tokio::time::interval(heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (term, silent_ms) = {
            let metrics = raft.metrics();
            let m = metrics.borrow();
            if m.state != ServerState::Leader {
                continue;
            }
            (m.current_term, m.millis_since_quorum_ack)
        };
        // A hand-over (MoveLeader, SIGTERM) stops heartbeats on purpose, for less than this.
        let silent = silent_ms.is_some_and(|ms| u128::from(ms) > election_timeout.as_millis());
        if !silent || route.is_held() {
            continue;
        }
        let last_log_id = raft.data_metrics().borrow().last_log;
        let request = VoteRequest::new(Vote::new(term + 1, NOBODY), last_log_id);
        match raft.vote(request).await {
            Ok(answer) if answer.vote_granted => tracing::warn!(
                silent_ms,
                term,
                "stepped down to follower since quorum is not active: no quorum of voters answered for an election timeout"
            ),
            // Its own vote is younger than openraft's leader lease: asked again at the next tick.
            Ok(_) => {}
            Err(err) => tracing::debug!(%err, "cannot step down"),
        }
    }
}
