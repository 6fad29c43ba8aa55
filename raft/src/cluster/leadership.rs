//! What changes on a member when it starts or stops leading: its lessor becomes primary or
//! stops being so. A new leader promotes its lessor only once it has applied everything
//! committed before its term (a read-index round, then the wait for apply), so that the lessor
//! knows every lease that exists; then every lease gets its full TTL, as etcd's new leader
//! extends them. Also the way a follower's lessor asks the leader's ([`LeaseForward`]).

use std::time::Duration;

use actix::Addr;
use futures::future::BoxFuture;

use crate::route::Route;
use crate::types::MemberNode;
use actcd_actors::lease::actor::LeaseActor;
use actcd_actors::lease::leader::LeaseLeader;
use actcd_actors::lease::messages::{Demote, Promote};
use actcd_store::StoreError;

use crate::network::peers::Peers;

/// A new leader that could not confirm its leadership tries again after this long.
const RETRY: Duration = Duration::from_millis(100);

/// Promotes and demotes `leases` as this member's leadership comes and goes, until the Raft
/// stops.
pub async fn follow(route: Route, leases: Addr<LeaseActor>) {
    let me = route.member_id();
    let mut metrics = route.raft().metrics();
    let mut leading = false;
    loop {
        let leads = metrics.borrow().current_leader == Some(me);
        if leads && !leading {
            let caught_up = match route.read_index_as_leader().await {
                Ok(index) => route.wait_applied(index).await,
                Err(err) => Err(err),
            };
            match caught_up {
                Ok(()) => {
                    leading = leases.send(Promote).await.is_ok();
                }
                Err(err) => {
                    tracing::debug!(%err, "cannot confirm the leadership yet");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        } else if !leads && leading {
            let _ = leases.send(Demote).await;
            leading = false;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// A follower's lessor asking the leader's, over the peer transport.
pub struct LeaseForward {
    route: Route,
    peers: Peers,
}

impl LeaseForward {
    /// Asks the leader `route` knows, through `peers`.
    pub fn new(route: Route, peers: Peers) -> Self {
        Self { route, peers }
    }
}

impl LeaseForward {
    /// The leader, if it is another member: a member elected but whose lessor is not primary
    /// yet cannot answer for it.
    async fn other_leader(route: &Route) -> Result<(u64, MemberNode), StoreError> {
        let leader = route.leader().await?;
        if leader.0 == route.member_id() {
            return Err(StoreError::LeaderChanged);
        }
        Ok(leader)
    }
}

impl LeaseLeader for LeaseForward {
    fn renew(&self, id: i64) -> BoxFuture<'static, Result<i64, StoreError>> {
        let (route, peers) = (self.route.clone(), self.peers.clone());
        Box::pin(async move { peers.lease_renew(Self::other_leader(&route).await?, id).await })
    }

    fn remaining(&self, id: i64) -> BoxFuture<'static, Result<Option<(i64, i64)>, StoreError>> {
        let (route, peers) = (self.route.clone(), self.peers.clone());
        Box::pin(async move { peers.lease_remaining(Self::other_leader(&route).await?, id).await })
    }
}
