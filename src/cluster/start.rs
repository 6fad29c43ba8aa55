//! openraft started for this member: its configuration from etcd's timing flags, the Raft
//! over the store's log and state machine, the cluster initialised on first start, and the
//! wait for a leader before clients are served.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::{Config as RaftConfig, Raft, SnapshotPolicy};

use actcd_actors::raft::log_store::LogStore;
use actcd_actors::raft::state_machine::{SnapshotDue, StateMachine};
use actcd_actors::raft::types::{MemberNode, TypeConfig};

use super::single_member::SingleMember;

/// etcd's timing flags, as openraft takes them.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `--heartbeat-interval`, milliseconds.
    pub heartbeat_ms: u64,
    /// `--election-timeout`, milliseconds: openraft picks each election's timeout between it
    /// and twice it, as etcd randomises between one and two election timeouts.
    pub election_ms: u64,
    /// `--snapshot-count`: applied commands after which a snapshot is taken and the log before
    /// it purged.
    pub snapshot_count: u64,
}

/// Entries kept in the log behind a snapshot, for a follower slightly behind to catch up from
/// without a snapshot. etcd keeps 5000 requests; an entry of ours carries a batch of up to
/// `--backend-batch-limit` writes, so fewer entries keep about as many writes under load.
const LOG_KEPT_AFTER_SNAPSHOT: u64 = 500;

/// Starts openraft for member `member_id` and, on a data dir that holds no cluster yet, forms
/// the cluster of `members`. Returns once a leader is known (a single member elects itself at
/// once), or fails after `leader_wait`.
pub async fn start(
    member_id: u64,
    members: BTreeMap<u64, MemberNode>,
    timing: Timing,
    log: LogStore,
    state_machine: StateMachine,
    leader_wait: Duration,
) -> anyhow::Result<Raft<TypeConfig>> {
    let config = RaftConfig {
        cluster_name: "actcd".into(),
        heartbeat_interval: timing.heartbeat_ms,
        election_timeout_min: timing.election_ms,
        election_timeout_max: timing.election_ms * 2,
        // Snapshots are asked for by the state machine, which counts commands (see
        // `StateMachine::with_snapshot_count`), not by openraft, which counts entries.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT,
        ..RaftConfig::default()
    };
    let config = Arc::new(config.validate().context("invalid raft timing")?);
    let due = SnapshotDue::default();
    let state_machine = state_machine.with_snapshot_count(timing.snapshot_count, Arc::clone(&due));
    let raft =
        Raft::new(member_id, config, SingleMember, log, state_machine).await.context("cannot start raft")?;
    if !raft.is_initialized().await.context("raft stopped")? {
        raft.initialize(members).await.context("cannot form the cluster")?;
    }
    let trigger = raft.clone();
    tokio::spawn(async move {
        loop {
            due.notified().await;
            if let Err(err) = trigger.trigger().snapshot().await {
                tracing::info!(%err, "raft stopped: no more snapshots");
                return;
            }
        }
    });
    raft.wait(Some(leader_wait))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .with_context(|| format!("no leader within {leader_wait:?}"))?;
    Ok(raft)
}
