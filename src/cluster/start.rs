//! openraft started for this member: its configuration from etcd's timing flags, the Raft
//! over the store's log and state machine, the cluster initialised on first start, and the
//! wait for a leader before clients are served.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::{Config as RaftConfig, Raft, SnapshotPolicy};

use actcd_actors::raft::log_store::LogStore;
use actcd_actors::raft::state_machine::StateMachine;
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
    /// `--snapshot-count`: applied entries after which a snapshot is taken and the log before
    /// it purged.
    pub snapshot_count: u64,
}

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
        snapshot_policy: SnapshotPolicy::LogsSinceLast(timing.snapshot_count),
        // etcd keeps 5000 entries after a snapshot for slow followers to catch up from.
        max_in_snapshot_log_to_keep: 5000,
        ..RaftConfig::default()
    };
    let config = Arc::new(config.validate().context("invalid raft timing")?);
    let raft =
        Raft::new(member_id, config, SingleMember, log, state_machine).await.context("cannot start raft")?;
    if !raft.is_initialized().await.context("raft stopped")? {
        raft.initialize(members).await.context("cannot form the cluster")?;
    }
    raft.wait(Some(leader_wait))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .with_context(|| format!("no leader within {leader_wait:?}"))?;
    Ok(raft)
}
