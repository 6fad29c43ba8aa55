//! Each member asks every other for the membership once an election timeout, as etcd's
//! members keep a stream open to every peer. Two things follow from the answers:
//!
//! - which peers answer, and since when without a break (`Peers::active_since`, etcd's
//!   ActiveSince): the membership checks count a peer healthy once it has answered for 5 s,
//!   on whichever member leads, not only on the one that led since the peers came up;
//! - whether this member was removed: a peer that lists it among the removed, or refuses it as
//!   removed, tells it so (a removed learner never campaigns, and a member that was down while
//!   it was removed hears from no leader, so waiting for a message would wait forever). It
//!   also learns it when it applies the membership that dropped it. Either way it is marked in
//!   [`Removed`]; the process then logs etcd's line and exits with status 0.
//!
//! The connections of members that left are dropped here too.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::removed::Removed;
use crate::route::Route;

use crate::network::peers::Peers;

/// Until the Raft stops or this member is removed: every `interval`, asks each other member
/// for the membership.
pub async fn run(route: Route, peers: Peers, removed: Removed, interval: Duration) {
    let me = route.member_id();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut members = BTreeSet::new();
    loop {
        ticks.tick().await;
        let others = {
            let metrics = route.raft().metrics();
            let metrics = metrics.borrow();
            if metrics.running_state.is_err() {
                return;
            }
            let membership = metrics.membership_config.membership();
            let now: BTreeSet<u64> = membership.nodes().map(|(id, _)| *id).collect();
            if now != members {
                peers.retain(&now);
                members = now;
            }
            membership
                .nodes()
                .filter(|(id, _)| **id != me)
                .map(|(id, node)| (*id, node.clone()))
                .collect::<Vec<_>>()
        };
        let asked = others.into_iter().map(|peer| {
            let peers = peers.clone();
            async move { peers.probe(peer).await }
        });
        for answer in futures::future::join_all(asked).await.into_iter().flatten() {
            if answer.removed.contains(&me) {
                removed.mark(me);
            }
        }
        if removed.contains(me) {
            return;
        }
    }
}
