//! Joining a running cluster (`--initial-cluster-state existing`), as a member that MemberAdd
//! added: the cluster's id and this member's id are the cluster's, not derived from the flags
//! (MemberAdd chose the id; the cluster id comes from the first members), so the member asks
//! the peers `--initial-cluster` names for the membership and finds itself in it by its
//! advertised peer URLs, as etcd's GetClusterFromRemotePeers does. Once joined, the data dir
//! holds both ids, and a restart reads them from there.

use std::time::Duration;

use crate::cluster::initial_cluster::InitialCluster;
use crate::network::peers::Peers;
use crate::network::tls_connector::TlsConnector;
use crate::removed::{Removed, REMOVED_TEXT};
use actcd_store::backend::member::MemberIds;

/// How long a joining member keeps asking its peers.
const ASK_FOR: Duration = Duration::from_secs(30);

/// Why a member cannot join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// `--initial-cluster` does not name this member.
    #[error("this member is not in --initial-cluster")]
    NotListed,
    /// `--initial-cluster` names no other member to ask.
    #[error("--initial-cluster-state existing: --initial-cluster names no other member to join through")]
    NoPeer,
    /// The cluster removed the member on these peer URLs.
    #[error("{REMOVED_TEXT}")]
    Removed,
    /// The cluster has no member on this member's peer URLs.
    #[error("error validating peerURLs: the cluster has no member on {0} (add it with MemberAdd first)")]
    NotAdded(String),
    /// No peer answered; the last failure.
    #[error("cannot reach the cluster to join through any of --initial-cluster's peers ({0})")]
    Unreachable(String),
}

/// The ids of this member of the cluster that `initial` names, as its other members know it;
/// https peers are dialed through `tls`.
pub async fn discover(initial: &InitialCluster, tls: Option<TlsConnector>) -> Result<MemberIds, JoinError> {
    let own = initial.own().ok_or(JoinError::NotListed)?;
    let peers = Peers::new(0, 0, tls, Removed::default());
    let urls: Vec<&String> =
        initial.members.iter().filter(|m| m.id != own.id).flat_map(|m| &m.peer_urls).collect();
    if urls.is_empty() {
        return Err(JoinError::NoPeer);
    }
    let deadline = tokio::time::Instant::now() + ASK_FOR;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        for url in &urls {
            match peers.members_at(url, 0).await {
                Ok((cluster_id, members)) => {
                    let found = members.nodes.iter().find(|(_, node)| {
                        let mut theirs = node.peer_urls.clone();
                        theirs.sort();
                        theirs == own.peer_urls
                    });
                    return match found {
                        Some((id, _)) if members.removed.contains(id) => Err(JoinError::Removed),
                        Some((id, _)) => Ok(MemberIds { cluster_id, member_id: *id }),
                        None => Err(JoinError::NotAdded(own.peer_urls.join(","))),
                    };
                }
                Err(err) => last = format!("{url}: {err}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(JoinError::Unreachable(last))
}
