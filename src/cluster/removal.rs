//! How a removed member learns it was removed, and stops.
//!
//! Three ways, whichever comes first: it applies the membership that dropped it (it was
//! reachable when the removal committed); a peer refuses one of its messages as a removed
//! member's (a removed voter campaigns once the leader's heartbeats stop); or, heard from by no
//! leader for [`QUIET`] election timeouts, it asks its peers for the membership and finds its
//! id among the removed (a removed learner never campaigns, and a member that was down while
//! it was removed hears from no one). Each marks this member in [`Removed`]; the process then
//! logs etcd's line and exits with status 0.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actcd_actors::raft::removed::Removed;
use actcd_actors::raft::route::Route;

use super::peers::Peers;

/// Election timeouts without a leader's append after which a member asks whether it was removed.
const QUIET: u32 = 3;

/// When this member last received a leader's append.
#[derive(Clone)]
pub struct Heard(Arc<Mutex<Instant>>);

impl Default for Heard {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Instant::now())))
    }
}

impl Heard {
    /// Notes an append received now.
    pub fn now(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn since(&self) -> Duration {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }
}

/// Until the Raft stops: drops the peer connections of members that left, and, while this
/// member hears from no leader, asks its peers every `election_timeout` whether it was removed.
pub async fn watch(route: Route, peers: Peers, removed: Removed, heard: Heard, election_timeout: Duration) {
    let me = route.member_id();
    let mut ticks = tokio::time::interval(election_timeout);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut members = BTreeSet::new();
    loop {
        ticks.tick().await;
        let (now, leads, urls) = {
            let metrics = route.raft().metrics();
            let metrics = metrics.borrow();
            if metrics.running_state.is_err() {
                return;
            }
            let membership = metrics.membership_config.membership();
            let now: BTreeSet<u64> = membership.nodes().map(|(id, _)| *id).collect();
            let urls: Vec<String> = membership
                .nodes()
                .filter(|(id, _)| **id != me)
                .filter_map(|(_, node)| node.peer_urls.first().cloned())
                .collect();
            (now, metrics.current_leader == Some(me), urls)
        };
        if now != members {
            peers.retain(&now);
            members = now;
        }
        if leads || heard.since() < election_timeout * QUIET {
            continue;
        }
        for url in urls {
            match peers.members_at(&url, me).await {
                Ok((_, answer)) if answer.removed.contains(&me) => removed.mark(me),
                Ok(_) => break,
                Err(err) => tracing::debug!(%url, %err, "cannot ask a peer for the membership"),
            }
            if removed.contains(me) {
                return;
            }
        }
    }
}
