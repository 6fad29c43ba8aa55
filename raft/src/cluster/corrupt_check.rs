//! etcd's corruption checks across members: the hash of the key-value history (HashKV) at one
//! revision must be the same on every member, since every member applied the same log.
//!
//! - `--experimental-initial-corrupt-check`: before it serves clients, a member compares its
//!   hash at its own revision with each reachable peer's at that revision, and refuses to start
//!   on a mismatch ("found data inconsistency with peers"), raising no alarm, as etcd 3.4.
//! - `--experimental-corrupt-check-time` (0, the default, is off): the leader compares its hash
//!   with its followers' that often, and raises the CORRUPT alarm for a member whose hash
//!   differs; the alarm stops every write, as etcd's does.
//!
//! A peer whose compaction revision differs hashed another range and is not compared, nor one
//! that has not applied the revision yet, nor one that cannot be reached (etcd skips them too).

use std::time::Duration;

use crate::proposer::Proposer;
use crate::route::Route;
use crate::types::MemberNode;
use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::{AlarmRequest, AlarmType};
use actcd_store::apply::command::WriteRequest;
use actcd_store::auth_store::Caller;
use actcd_store::mvcc::hash::{self, KvHash};
use actcd_store::{Command, ReadView, RocksEngine, StoreError};

use crate::network::peers::Peers;

/// Why the start-up check failed.
#[derive(Debug, thiserror::Error)]
pub enum CorruptError {
    /// This member's own hash could not be taken.
    #[error(transparent)]
    Hash(#[from] StoreError),
    /// A reachable peer's history differs from this member's (`.0`).
    #[error("{0:x} found data inconsistency with peers")]
    Inconsistent(u64),
}

/// HashKV of this member's store, for the checks and for peers that ask.
#[derive(Clone)]
pub struct Hasher {
    engine: RocksEngine,
    view: ReadView<RocksEngine>,
}

impl Hasher {
    /// Hashes the store of `engine`, whose revisions `view` tells.
    pub fn new(engine: RocksEngine, view: ReadView<RocksEngine>) -> Self {
        Self { engine, view }
    }

    /// HashKV at `revision` (0: the current one), off the async threads.
    pub async fn hash_at(&self, revision: i64) -> Result<KvHash, StoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            hash::hash_kv(&this.engine, revision, this.view.revision(), this.view.compacted_revision())
        })
        .await
        .map_err(|e| StoreError::Stopped(e.to_string()))?
    }
}

/// The other members, as the Raft membership names them.
fn others(route: &Route) -> Vec<(u64, MemberNode)> {
    let metrics = route.raft().metrics();
    let metrics = metrics.borrow();
    let me = route.member_id();
    metrics
        .membership_config
        .membership()
        .nodes()
        .filter(|(id, _)| **id != me)
        .map(|(id, n)| (*id, n.clone()))
        .collect()
}

/// The peers whose hash at `mine`'s revision differs from `mine`, compared where they can be.
async fn mismatched(route: &Route, peers: &Peers, mine: KvHash) -> Vec<(u64, KvHash)> {
    let mut out = Vec::new();
    for (id, node) in others(route) {
        match peers.hash_kv((id, node), mine.hash_revision).await {
            Ok(theirs) if theirs.compact_revision == mine.compact_revision && theirs.hash != mine.hash => {
                tracing::error!(
                    member = %format!("{:x}", route.member_id()),
                    hash = mine.hash,
                    peer = %format!("{id:x}"),
                    peer_hash = theirs.hash,
                    revision = mine.hash_revision,
                    compact_revision = mine.compact_revision,
                    "hash mismatch"
                );
                out.push((id, theirs));
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(peer = %format!("{id:x}"), %err, "cannot fetch hash from peer"),
        }
    }
    out
}

/// The start-up check: fails when a reachable peer's history differs from this member's.
pub async fn initial(route: &Route, peers: &Peers, hasher: &Hasher) -> Result<(), CorruptError> {
    let mine = hasher.hash_at(0).await?;
    if !mismatched(route, peers, mine).await.is_empty() {
        return Err(CorruptError::Inconsistent(route.member_id()));
    }
    tracing::info!(revision = mine.hash_revision, "initial corruption check passed");
    Ok(())
}

/// The leader's periodic check, every `every`, until the process ends; alarms are proposed
/// through `writer`.
pub async fn periodic(route: Route, peers: Peers, hasher: Hasher, writer: Proposer, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if route.raft().metrics().borrow().current_leader != Some(route.member_id()) {
            continue;
        }
        let Ok(mine) = hasher.hash_at(0).await else { continue };
        for (id, _) in mismatched(&route, &peers, mine).await {
            let alarm = AlarmRequest {
                action: AlarmAction::Activate as i32,
                member_id: id,
                alarm: AlarmType::Corrupt as i32,
            };
            let command = Command::Alarm(alarm).from_caller(Caller::Member);
            let raised = writer.write(command).await.and_then(AlarmRequest::response);
            if let Err(err) = raised {
                tracing::warn!(%err, "cannot raise the CORRUPT alarm");
            }
        }
    }
}
