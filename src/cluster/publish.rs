//! A member's record in the membership: what MemberList shows of it. The cluster forms with
//! the names and peer URLs of `--initial-cluster`, which every member knows alike (openraft
//! accepts the same first membership from several members only if it is identical); the client
//! URLs are each member's own, so each publishes them once it has a leader, as etcd's members
//! publish their attributes through the log after they start.

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::{ChangeMembers, Raft};

use actcd_actors::raft::route::{write_refusal, Route};
use actcd_actors::raft::types::{MemberNode, TypeConfig};
use actcd_actors::store::StoreError;

use super::peers::Peers;

/// How long a member waits between tries when publishing failed.
const RETRY: Duration = Duration::from_secs(1);

/// Publishes `record` for this member until the membership holds it. A member of a cluster
/// does it in the background (it serves clients meanwhile, and MemberList shows no client
/// URLs for it yet); a member alone before it serves, as etcd does.
pub async fn publish(route: Route, peers: Peers, record: MemberNode) {
    let me = route.member_id();
    loop {
        let known = {
            let metrics = route.raft().metrics();
            let metrics = metrics.borrow();
            metrics.membership_config.membership().get_node(&me).cloned()
        };
        if known.as_ref() == Some(&record) {
            return;
        }
        let done = match route.leader().await {
            Ok((leader, _)) if leader == me => set_node(route.raft(), me, record.clone()).await,
            Ok(leader) => peers.publish(leader, record.clone()).await,
            Err(err) => Err(err),
        };
        if let Err(err) = done {
            tracing::debug!(%err, "cannot publish this member's record yet");
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Writes `record` as member `id`'s into the membership, on the leader. Only the record
/// changes, never who votes, and a member may set only its own.
pub async fn set_node(raft: &Raft<TypeConfig>, id: u64, record: MemberNode) -> Result<(), StoreError> {
    let known = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        metrics.membership_config.membership().get_node(&id).cloned()
    };
    match known {
        None => return Err(StoreError::Stopped(format!("member {id:x} is not in the membership"))),
        Some(known) if known == record => return Ok(()),
        // The name and peer URLs are the cluster's: only the client URLs are the member's.
        Some(known) if known.name != record.name || known.peer_urls != record.peer_urls => {
            return Err(StoreError::Stopped(format!("member {id:x} may publish only its client URLs")));
        }
        Some(_) => {}
    }
    let change = ChangeMembers::SetNodes(BTreeMap::from([(id, record)]));
    raft.change_membership(change, true).await.map(|_| ()).map_err(|e| write_refusal(&e))
}
