//! openraft started for this member: its configuration from etcd's timing flags, the Raft
//! over the store's log and state machine and the peer transport, the cluster initialised on
//! first start, and the wait for a leader before clients are served.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{Fatal, InitializeError, RaftError};
use openraft::metrics::WaitError;
use openraft::{Config as RaftConfig, ConfigError, Raft, SnapshotPolicy};

use crate::log_store::LogStore;
use crate::state_machine::{SnapshotDue, StateMachine};
use crate::types::{MemberNode, TypeConfig};
use actcd_actors::identity::Identity;

use crate::network::peers::Peers;

/// etcd's timing flags, as openraft takes them.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// `--heartbeat-interval`, milliseconds.
    pub heartbeat_ms: u64,
    /// `--election-timeout`, milliseconds (see [`election_window`] for how openraft takes it).
    pub election_ms: u64,
    /// `--snapshot-count`: applied commands after which a snapshot is taken and the log before
    /// it purged.
    pub snapshot_count: u64,
}

impl Timing {
    /// How long a request waits for a leader and for its commit: etcd's request timeout, 5 s
    /// plus two election timeouts.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(5) + Duration::from_millis(2 * self.election_ms)
    }
}

/// Why this member's Raft did not start, or found no leader.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// openraft refused the timing the flags gave.
    #[error("invalid raft timing")]
    Timing(#[source] ConfigError),
    /// openraft did not start over the log and the state machine.
    #[error("cannot start raft")]
    Start(#[source] Fatal<u64>),
    /// openraft stopped before it said whether it holds a cluster.
    #[error("raft stopped")]
    Stopped(#[source] Fatal<u64>),
    /// openraft refused the first membership.
    #[error("cannot form the cluster")]
    Form(#[source] RaftError<u64, InitializeError<u64, MemberNode>>),
    /// No leader within the wait.
    #[error("no leader within {0:?}")]
    NoLeader(Duration, #[source] WaitError),
}

/// Entries kept in the log behind a snapshot, for a follower slightly behind to catch up from
/// without a snapshot. etcd keeps 5000 requests; an entry of ours carries a batch of up to
/// `--backend-batch-limit` writes, so fewer entries keep about as many writes under load.
const LOG_KEPT_AFTER_SNAPSHOT: u64 = 500;

/// Entries one append message carries at most. An entry holds up to `--backend-batch-limit`
/// writes; fewer entries than openraft's default 300 keep one message well below
/// [`crate::network::peers::MAX_PEER_MESSAGE`] under load.
pub const MAX_PAYLOAD_ENTRIES: u64 = 64;

/// openraft's election timeouts (min, max) for etcd's `--election-timeout`. A follower of an
/// etcd cluster campaigns a random one to two election timeouts after the leader's last
/// heartbeat. A follower of openraft 0.9 that knew a leader first waits out that leader's lease
/// (openraft's max election timeout), then a random timeout between min and max: min = 0.3 and
/// max = 0.6 election timeouts put its campaign 0.9 to 1.2 election timeouts after the last
/// heartbeat, so that a leader's death costs about what it costs on etcd (the flags' check,
/// election timeout at least five heartbeats, keeps min above one heartbeat).
pub fn election_window(election_ms: u64) -> (u64, u64) {
    ((election_ms * 3 / 10).max(1), (election_ms * 6 / 10).max(2))
}

/// Starts openraft for member `member_id`, reaching the others through `peers`, and, on a data
/// dir that holds no cluster yet, forms the cluster of `first` (every member of a new cluster
/// does, with the same members; a member joining an existing cluster forms none: the leader
/// brings it the membership).
pub async fn start(
    member_id: u64,
    first: Option<BTreeMap<u64, MemberNode>>,
    timing: Timing,
    peers: Peers,
    log: LogStore,
    state_machine: StateMachine,
) -> Result<Raft<TypeConfig>, StartError> {
    let config = RaftConfig {
        cluster_name: "actcd".into(),
        heartbeat_interval: timing.heartbeat_ms,
        election_timeout_min: election_window(timing.election_ms).0,
        election_timeout_max: election_window(timing.election_ms).1,
        // Snapshots are asked for by the state machine, which counts commands (see
        // `StateMachine::with_snapshot_count`), not by openraft, which counts entries.
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT,
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        ..RaftConfig::default()
    };
    let config = Arc::new(config.validate().map_err(StartError::Timing)?);
    let due = SnapshotDue::default();
    let state_machine = state_machine.with_snapshot_count(timing.snapshot_count, Arc::clone(&due));
    let raft = Raft::new(member_id, config, peers, log, state_machine).await.map_err(StartError::Start)?;
    if let Some(members) = first {
        if !raft.is_initialized().await.map_err(StartError::Stopped)? {
            raft.initialize(members).await.map_err(StartError::Form)?;
        }
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
    Ok(raft)
}

/// Waits until `raft` knows a leader (a single member elects itself at once; the members of
/// a new cluster once a quorum of them runs), or fails after `leader_wait`.
pub async fn wait_for_leader(raft: &Raft<TypeConfig>, leader_wait: Duration) -> Result<(), StartError> {
    raft.wait(Some(leader_wait))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .map_err(|e| StartError::NoLeader(leader_wait, e))?;
    Ok(())
}

/// Keeps the term in response headers the one openraft is in, etcd's leader series
/// (`etcd_server_has_leader`, `etcd_server_is_leader`, `etcd_server_leader_changes_seen_total`:
/// a change to a leader other than the last one known, as etcd counts it), and logs each leader
/// change once, as etcd's raft does ("elected leader X at term T"); until the Raft stops.
pub async fn follow_term(raft: Raft<TypeConfig>, identity: Identity) {
    use actcd_store::metric_names::{
        ETCD_SERVER_HAS_LEADER, ETCD_SERVER_IS_LEADER, ETCD_SERVER_LEADER_CHANGES_SEEN_TOTAL,
    };
    let mut metrics = raft.metrics();
    let (mut leader, mut last_known) = (None, None);
    loop {
        let (term, now) = {
            let m = metrics.borrow();
            (m.current_term, m.current_leader)
        };
        identity.set_raft_term(term.max(1));
        {
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            let member = membership.get_node(&identity.member_id).is_some();
            identity.set_learner(member && !membership.voter_ids().any(|v| v == identity.member_id));
        }
        metrics::gauge!(ETCD_SERVER_HAS_LEADER).set(if now.is_some() { 1.0 } else { 0.0 });
        metrics::gauge!(ETCD_SERVER_IS_LEADER).set(if now == Some(identity.member_id) { 1.0 } else { 0.0 });
        if now.is_some() && now != last_known {
            metrics::counter!(ETCD_SERVER_LEADER_CHANGES_SEEN_TOTAL).increment(1);
            last_known = now;
        }
        if now != leader {
            match now {
                Some(id) => {
                    tracing::info!(member = %format!("{:x}", identity.member_id), leader = %format!("{id:x}"), term, "elected leader")
                }
                None => {
                    tracing::info!(member = %format!("{:x}", identity.member_id), term, "lost the leader")
                }
            }
            leader = now;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
