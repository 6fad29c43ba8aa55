//! The Raft state machine: committed log entries, in log order, applied by the one
//! [`StoreCore`] on every member. An `apply` call gets every entry committed since the last one,
//! applies their commands into one [`Batch`] and writes it as one RocksDB WriteBatch, with the
//! last applied log id (and the membership, when an entry changed it) in the same batch: the
//! data and the position it reflects can never disagree after a crash (etcd's consistent index).
//!
//! That write has no fsync of its own. An entry is applied only once it is durable in this
//! member's log (the leader's own fsync may still be running when a commit arrives: see
//! [`super::log_durability`]), and a restart replays the log from the last applied id over
//! whatever a crash lost of RocksDB's unsynced tail; so a write costs one fsync, the log's.
//! RocksDB's WAL is synced behind it every 100 ms ([`super::applied_sync`]) and where the log
//! lets entries go: a purge writes its mark with fsync first (see [`super::log_store`]), and a
//! snapshot flushes the memtables.
//!
//! Only after the write are the changes visible, the answers returned to openraft (which
//! hands them to the proposer) and the events published to this member's watch shards, one
//! shared message to each: every member feeds its watchers from its own apply stream, with the
//! same revisions.

use std::sync::{Arc, Mutex, MutexGuard};

use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::{AlarmRequest, AlarmType};
use actix::dev::SendError;
use actix::Recipient;
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};

use super::fail_stop::FailStop;
use super::log_durability::LogDurability;
use super::log_store::{LogStore, RecentEntries};
use super::position::{recorded_position, recorded_removed, Membership};
use super::removed::{dropped, Removed};
use super::snapshot_store::SnapshotStore;
use super::types::{encode, Applied, MemberNode, Proposal, SnapshotFiles, TypeConfig};
use actcd_actors::lease::feed::LeaseFeed;
use actcd_actors::lease::leader::LeaseSource;
use actcd_actors::watch::messages::Committed;
use actcd_store::backend::codec::{RAFT_MEMBERSHIP_KEY, RAFT_REMOVED_KEY};
use actcd_store::backend::engine::Family;
use actcd_store::metric_names::{hot, ActorKind};
use actcd_store::{Batch, Command, CommittedEvents, RocksEngine, StoreCore, StoreError};

type Error = StorageError<u64>;

/// The store core, shared between the state machine (the only writer) and the few queries
/// that read its writer-owned state (lease keys, the lease list). A query waits at most for
/// the batch being applied.
#[derive(Clone)]
pub struct CoreHandle(Arc<Mutex<StoreCore<RocksEngine>>>);

impl CoreHandle {
    /// Locks the core.
    pub fn lock(&self) -> Result<MutexGuard<'_, StoreCore<RocksEngine>>, StoreError> {
        self.0.lock().map_err(|_| StoreError::Stopped("the store core lock is poisoned".into()))
    }
}

/// The lessor's view of the applied leases, listed when it starts or lost track of the
/// changes that apply hands it ([`StateMachine::with_lease_feed`]).
impl LeaseSource for CoreHandle {
    fn list(&mut self) -> Result<Vec<(i64, i64)>, StoreError> {
        Ok(self.lock()?.lease_list())
    }
}

/// One member's state machine.
pub struct StateMachine {
    core: CoreHandle,
    /// Where committed events go: each of the member's watch shards.
    shards: Vec<Recipient<Committed>>,
    /// Where each applied batch's lease changes go (the lessor).
    leases: Option<LeaseFeed>,
    applied: Option<LogId<u64>>,
    membership: Membership,
    /// Every id a committed membership dropped (see [`super::removed`]).
    removed: Removed,
    snapshots: SnapshotStore,
    /// Told once, with the reason, when a write fails and the state machine stops.
    fail_stop: FailStop,
    /// etcd's `--snapshot-count`: a snapshot is due after this many applied commands.
    snapshot_every: Option<(u64, SnapshotDue)>,
    /// Commands applied since the last snapshot was asked for.
    since_snapshot: u64,
    /// The log's in-memory copies of appended entries, let go once applied.
    recent: Option<RecentEntries>,
    /// How far the log is durable: nothing past it is applied.
    durability: Option<LogDurability>,
}

/// Rung when `--snapshot-count` commands were applied since the last snapshot, for whoever
/// holds the Raft handle to ask openraft for one. Holds one permit at most: a snapshot asked
/// for twice before it is taken is taken once.
pub type SnapshotDue = Arc<tokio::sync::Notify>;

fn write_error(err: impl std::fmt::Display) -> Error {
    StorageIOError::write_state_machine(AnyError::error(err.to_string())).into()
}

impl StateMachine {
    /// The state machine over `core`, whose data dir keeps its snapshots in `snapshots`;
    /// committed events go to each of `shards`.
    pub fn new(
        core: StoreCore<RocksEngine>,
        snapshots: SnapshotStore,
        shards: Vec<Recipient<Committed>>,
    ) -> Result<Self, Error> {
        let (applied, membership) = recorded_position(core.engine())?;
        let removed = Removed::new(recorded_removed(core.engine())?);
        Ok(Self {
            core: CoreHandle(Arc::new(Mutex::new(core))),
            shards,
            leases: None,
            applied,
            membership,
            removed,
            snapshots,
            fail_stop: FailStop::default(),
            snapshot_every: None,
            since_snapshot: 0,
            recent: None,
            durability: None,
        })
    }

    /// Applies the entries of `log`: each once it is durable there, its in-memory copy let
    /// go as soon as it is applied.
    pub fn with_log(mut self, log: &LogStore) -> Self {
        self.recent = Some(log.recent_entries());
        self.durability = Some(log.durability());
        self
    }

    /// Rings `due` each time `count` commands were applied since the last ring. Counted in
    /// commands, as etcd counts its entries (one request each), not in our batched entries:
    /// the log is purged after a snapshot, so its size follows what the clients wrote.
    pub fn with_snapshot_count(mut self, count: u64, due: SnapshotDue) -> Self {
        self.snapshot_every = Some((count.max(1), due));
        self
    }

    /// Hands each applied batch's lease changes to `feed`, the lessor's.
    pub fn with_lease_feed(self, feed: LeaseFeed) -> Self {
        self.core.lock().expect("a new core's lock").journal_leases();
        Self { leases: Some(feed), ..self }
    }

    /// Reports to `fail_stop` when a write fails (see [`super::fail_stop`]).
    pub fn with_fail_stop(mut self, fail_stop: FailStop) -> Self {
        self.fail_stop = fail_stop;
        self
    }

    /// The removed ids, as this state machine records them.
    pub fn removed(&self) -> Removed {
        self.removed.clone()
    }

    /// A handle on the core for the queries of writer-owned state.
    pub fn core(&self) -> CoreHandle {
        self.core.clone()
    }

    fn apply_entries(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<Vec<Applied>, Error> {
        let Some(last) = entries.last().map(|e| e.log_id) else {
            return Ok(Vec::new());
        };
        let mut core = self.core.lock().map_err(write_error)?;
        let mut batch = Batch::default();
        let mut answers = Vec::with_capacity(entries.len());
        let mut membership_changed = false;
        let mut removed = self.removed.ids();
        let (mut commands, mut failed) = (0u64, 0u64);
        for entry in entries {
            match entry.payload {
                EntryPayload::Blank => answers.push(Applied::default()),
                EntryPayload::Membership(membership) => {
                    let after = membership.nodes().map(|(id, _)| *id).collect();
                    let before = self.membership.membership().nodes().map(|(id, _)| id);
                    removed.extend(dropped(before, &after));
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    membership_changed = true;
                    answers.push(Applied::default());
                }
                EntryPayload::Normal(proposal) => {
                    let results = apply_proposal(&mut core, &proposal, &mut batch);
                    commands += results.len() as u64;
                    failed += results.iter().filter(|r| r.is_err()).count() as u64;
                    answers.push(Applied(results));
                }
            }
        }
        if membership_changed {
            batch.writes.put(
                Family::Meta,
                RAFT_MEMBERSHIP_KEY.to_vec(),
                encode(&self.membership).map_err(write_error)?,
            );
            batch.writes.put(Family::Meta, RAFT_REMOVED_KEY.to_vec(), encode(&removed).map_err(write_error)?);
        }
        let started = std::time::Instant::now();
        // A failed write stops the core for good and openraft with it (fail-stop): neither the
        // memory nor the disk state can be vouched for, and no answer of the batch goes out.
        let events = match core.commit_by_log(batch, super::position::position(&last)) {
            Ok(events) => events,
            Err(err) => {
                self.fail_stop.stop(&err);
                return Err(write_error(err));
            }
        };
        metrics::histogram!(actcd_store::metric_names::ETCD_DISK_BACKEND_COMMIT_DURATION_SECONDS)
            .record(started.elapsed().as_secs_f64());
        metrics::histogram!(actcd_store::metric_names::ACTCD_STORE_BATCH_SIZE).record(commands as f64);
        // A member applies what is committed, in full: the two counts move together.
        metrics::counter!(actcd_store::metric_names::ETCD_SERVER_PROPOSALS_COMMITTED_TOTAL)
            .increment(commands);
        metrics::counter!(actcd_store::metric_names::ETCD_SERVER_PROPOSALS_APPLIED_TOTAL).increment(commands);
        metrics::counter!(actcd_store::metric_names::ETCD_SERVER_PROPOSALS_FAILED_TOTAL).increment(failed);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Apply.label())
            .set(core.lease_heap_bytes() as f64);
        self.hand_over_leases(&mut core);
        drop(core);
        self.applied = Some(last);
        if membership_changed {
            self.removed.set(removed);
        }
        if let Some(recent) = &self.recent {
            recent.applied(last.index);
        }
        self.publish(events);
        self.since_snapshot += commands;
        if let Some((every, due)) = &self.snapshot_every {
            if self.since_snapshot >= *every {
                self.since_snapshot = 0;
                due.notify_one();
            }
        }
        Ok(answers)
    }

    /// The lease changes applied since the last call, to the lessor.
    fn hand_over_leases(&self, core: &mut StoreCore<RocksEngine>) {
        if let Some(feed) = &self.leases {
            feed.send(core.take_lease_changes());
        }
    }

    fn publish(&self, events: CommittedEvents) {
        if self.shards.is_empty() || events.revision == events.prev_revision {
            return;
        }
        let committed = Committed(Arc::new(events));
        #[cfg(feature = "failpoints")]
        if fail::list().iter().any(|(name, _)| name == "apply::before_notify") {
            // Held off the apply path, so that the answers go out while the events are held.
            let shards = self.shards.clone();
            std::thread::spawn(move || {
                fail::fail_point!("apply::before_notify");
                publish_to(&shards, &committed);
            });
            return;
        }
        publish_to(&self.shards, &committed);
    }
}

/// The same batch to every shard; never blocks the writer: a full shard misses the batch, and
/// its watchers notice the gap in revisions and read it from storage (see the watcher group).
fn publish_to(shards: &[Recipient<Committed>], committed: &Committed) {
    for shard in shards {
        match shard.try_send(committed.clone()) {
            Ok(()) => hot::mailbox_depth(ActorKind::WatchShard).increment(1.0),
            Err(SendError::Full(_)) => {
                tracing::debug!(revision = committed.0.revision, "a watch shard is behind; it will catch up")
            }
            Err(SendError::Closed(_)) => {}
        }
    }
}

/// Applies one proposal's commands in order. A write the quota refuses raises NOSPACE for the
/// proposing member in the same batch, as etcd's server does when an apply answers ErrNoSpace:
/// the alarm is durable and listed before the refused client hears its answer, and every
/// member raises the same alarm for the same member.
fn apply_proposal(
    core: &mut StoreCore<RocksEngine>,
    proposal: &Proposal,
    batch: &mut Batch,
) -> Vec<Result<actcd_store::CommandResponse, StoreError>> {
    let mut results = Vec::with_capacity(proposal.commands.len());
    for command in &proposal.commands {
        let result = core.apply(command, batch);
        if matches!(result, Err(StoreError::NoSpace)) && !core.alarms().has(AlarmType::Nospace) {
            let raise = AlarmRequest {
                action: AlarmAction::Activate as i32,
                member_id: proposal.proposer,
                alarm: AlarmType::Nospace as i32,
            };
            // Its answer goes nowhere: the refused write answers NoSpace itself.
            let _ = core.apply(&Command::Alarm(raise), batch);
        }
        results.push(result);
    }
    results
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<u64>>, Membership), Error> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        if let (Some(durability), Some(last)) = (&self.durability, entries.last()) {
            durability.wait(last.log_id.index).await.map_err(write_error)?;
        }
        self.apply_entries(entries)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder { core: self.core.clone(), snapshots: self.snapshots.clone() }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotFiles>, Error> {
        Ok(Box::new(SnapshotFiles::unheld(self.snapshots.receiving_dir())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, MemberNode>,
        snapshot: Box<SnapshotFiles>,
    ) -> Result<(), Error> {
        let mut core = self.core.lock().map_err(write_error)?;
        let before = core.read_view().revision();
        // openraft stops its core on a failed install and never says so: end the process
        // (etcd panics here too); the peer service refuses a snapshot that arrived incomplete
        // before it gets this far.
        if let Err(err) = self.snapshots.install(&mut core, meta, &snapshot.dir) {
            self.fail_stop.stop(format!("installing a snapshot failed: {err}"));
            return Err(err);
        }
        let revision = core.read_view().revision();
        // The reload's, which makes the lessor list the leases the snapshot brought.
        self.hand_over_leases(&mut core);
        // The snapshot's removed ids join those known here: a removed id never comes back.
        let mut removed = recorded_removed(core.engine())?;
        removed.extend(self.removed.ids());
        drop(core);
        self.removed.set(removed);
        let index = meta.last_log_id.map_or(0, |id| id.index);
        tracing::info!(index, revision, "installed a snapshot from the leader");
        // The revisions the snapshot brought were never published: a batch that starts past
        // what the watch tree processed makes every watcher catch up from the new history
        // (etcd 15271: a watcher must not skip what a snapshot installed). Were it dropped, the
        // next live batch shows the same gap.
        if revision > before {
            let resync = CommittedEvents { prev_revision: revision, revision, events: Vec::new() };
            publish_to(&self.shards, &Committed(Arc::new(resync)));
        }
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        self.snapshots.current()
    }
}

/// Builds snapshots: a checkpoint of the database taken under the core's lock, so that it
/// holds exactly the entries up to the applied id it records.
pub struct SnapshotBuilder {
    core: CoreHandle,
    snapshots: SnapshotStore,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Error> {
        let core = self.core.lock().map_err(write_error)?;
        self.snapshots.build(core.engine())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{AlarmMember, PutRequest, RangeRequest};
    use bytes::Bytes;
    use openraft::{CommittedLeaderId, Membership as RaftMembership};

    use actcd_store::{CommandResponse, ReadView, StoreConfig};

    fn machine(config: StoreConfig) -> (tempfile::TempDir, StateMachine, ReadView<RocksEngine>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&dir.path().join("db")).expect("rocksdb opens");
        let core = StoreCore::open(engine, config).expect("store opens");
        let view = core.read_view();
        let snapshots = SnapshotStore::open(dir.path().join("snapshots")).expect("snapshots");
        (dir, StateMachine::new(core, snapshots, Vec::new()).expect("state machine"), view)
    }

    fn log_id(index: u64) -> LogId<u64> {
        LogId { leader_id: CommittedLeaderId::new(1, 1), index }
    }

    fn put(key: &'static str, value: Vec<u8>) -> Command {
        Command::Put(PutRequest {
            key: Bytes::from_static(key.as_bytes()),
            value: value.into(),
            ..Default::default()
        })
    }

    fn normal(index: u64, proposer: u64, commands: Vec<Command>) -> Entry<TypeConfig> {
        Entry { log_id: log_id(index), payload: EntryPayload::Normal(Proposal::new(proposer, commands)) }
    }

    fn revisions(answers: &Applied) -> Vec<Result<i64, StoreError>> {
        answers
            .0
            .iter()
            .map(|a| match a {
                Ok(CommandResponse::Put(p)) => Ok(p.header.as_ref().map(|h| h.revision).unwrap_or(0)),
                Ok(other) => panic!("unexpected answer {other:?}"),
                Err(e) => Err(e.clone()),
            })
            .collect()
    }

    #[test]
    fn one_apply_writes_every_entry_and_its_position_together_and_answers_each_command() {
        let (_dir, mut sm, view) = machine(StoreConfig::default());
        let membership = Entry {
            log_id: log_id(1),
            payload: EntryPayload::Membership(RaftMembership::new(vec![[1].into()], None)),
        };
        let entries = vec![
            membership,
            Entry { log_id: log_id(2), payload: EntryPayload::Blank },
            normal(3, 1, vec![put("a", vec![]), put("b", vec![]), put("", vec![]), put("c", vec![])]),
        ];
        let answers = sm.apply_entries(entries).expect("applied");
        assert_eq!(answers.len(), 3, "one answer per entry");
        assert!(answers[0].0.is_empty() && answers[1].0.is_empty());
        assert_eq!(
            revisions(&answers[2]),
            [Ok(2), Ok(3), Err(StoreError::EmptyKey), Ok(4)],
            "a refused command answers its own error and takes no revision; the others commit"
        );
        assert_eq!(view.revision(), 4);
        assert_eq!(view.applied_index(), 3, "Status's applied index is the log's");
        let all = RangeRequest {
            key: Bytes::from_static(b"\0"),
            range_end: Bytes::from_static(b"\0"),
            ..Default::default()
        };
        assert_eq!(view.range(&all).map(|r| r.count), Ok(3));

        // What a restart finds: the position written with the data.
        let core = sm.core();
        let (applied, membership) =
            recorded_position(core.lock().expect("core").engine()).expect("read back");
        assert_eq!(applied, Some(log_id(3)));
        assert_eq!(membership.log_id(), &Some(log_id(1)));
    }

    #[test]
    fn a_snapshot_is_due_after_snapshot_count_commands_not_entries() {
        use futures::FutureExt;
        let (_dir, sm, _view) = machine(StoreConfig::default());
        let due = SnapshotDue::default();
        let mut sm = sm.with_snapshot_count(3, Arc::clone(&due));
        sm.apply_entries(vec![normal(1, 1, vec![put("a", vec![]), put("b", vec![])])]).expect("applied");
        assert!(due.notified().now_or_never().is_none(), "two commands: not yet");
        sm.apply_entries(vec![Entry { log_id: log_id(2), payload: EntryPayload::Blank }]).expect("applied");
        assert!(due.notified().now_or_never().is_none(), "a blank entry is no command");
        sm.apply_entries(vec![normal(3, 1, vec![put("c", vec![])])]).expect("applied");
        assert!(due.notified().now_or_never().is_some(), "three commands: due");
        sm.apply_entries(vec![normal(4, 1, vec![put("d", vec![])])]).expect("applied");
        assert!(due.notified().now_or_never().is_none(), "the count starts again");
    }

    #[test]
    fn a_write_over_the_quota_raises_nospace_for_its_proposer_in_the_same_entry() {
        let (_dir, mut sm, view) = machine(StoreConfig { quota_bytes: 64 << 10, ..StoreConfig::default() });
        let answers = sm
            .apply_entries(vec![normal(1, 42, vec![put("big", vec![0; 128 << 10]), put("small", vec![])])])
            .expect("applied");
        assert_eq!(revisions(&answers[0]), [Err(StoreError::NoSpace), Err(StoreError::NoSpace)]);
        let raised = AlarmMember { member_id: 42, alarm: AlarmType::Nospace as i32 };
        assert_eq!(
            view.alarms(AlarmType::None),
            Ok(vec![raised]),
            "raised for the proposer, listed with the entry"
        );
    }
}
