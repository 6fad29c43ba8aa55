//! One group commit: the writes queued since the last flush, applied in order into one
//! [`Batch`], made durable with one WriteBatch and one fsync, then answered. A write is never
//! answered before its batch is durable, and a failed commit acknowledges no write of its batch.
//! A plain struct that tests drive directly; when a batch forms is the StoreActor's business
//! (see [`super::actor`]).
//!
//! A write the quota refuses raises NOSPACE for this member, as etcd's server does when an
//! apply answers ErrNoSpace: here by applying the Alarm command into the same batch, so the
//! alarm is durable and listed before the refused client hears its answer. (On a replicated
//! log this becomes a proposal: the state machine itself never picks a member id.)

use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::{AlarmRequest, AlarmType};

use super::messages::Write;
use super::mvcc::batch::Batch;
use super::mvcc::command::Command;
use super::mvcc::engine::Engine;
use super::mvcc::error::StoreError;
use super::mvcc::writer::{CommittedEvents, StoreCore};

/// Queued writes and the store they are applied to.
pub struct GroupCommit<E> {
    core: StoreCore<E>,
    queue: Vec<Write>,
    /// The most writes one batch takes (etcd's `--backend-batch-limit`): a batch that reaches
    /// it is committed at once rather than when the mailbox is drained, which bounds both the
    /// queue and the time the first write of a long burst waits for its fsync.
    limit: usize,
    /// This member's id, for the NOSPACE alarm it raises.
    member_id: u64,
}

/// etcd's default backend batch limit.
pub const DEFAULT_BATCH_LIMIT: usize = 10_000;

/// What the writer must do once a write is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// The first write of a new batch: schedule a flush, to run once the mailbox is drained.
    FirstOfBatch,
    /// Joined the batch a flush is already scheduled for.
    Joined,
    /// The batch reached its limit: flush now. (The flush scheduled for it finds the next
    /// batch, or nothing.)
    Full,
}

/// What one flush did, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Commands in the batch.
    pub commands: usize,
    /// Whether the commit (the fsync) succeeded.
    pub committed: bool,
}

impl<E: Engine> GroupCommit<E> {
    /// Wraps an opened store for member `member_id`; batches take at most `limit` writes (at
    /// least one).
    pub fn new(core: StoreCore<E>, limit: usize, member_id: u64) -> Self {
        Self { core, queue: Vec::new(), limit: limit.max(1), member_id }
    }

    /// The store.
    pub fn core(&self) -> &StoreCore<E> {
        &self.core
    }

    /// Queues a write and says when to flush.
    pub fn push(&mut self, write: Write) -> Queued {
        self.queue.push(write);
        if self.queue.len() >= self.limit {
            Queued::Full
        } else if self.queue.len() == 1 {
            Queued::FirstOfBatch
        } else {
            Queued::Joined
        }
    }

    /// Applies every queued write into one batch, commits it, then answers each write: with
    /// its result if the commit succeeded, with the commit's error otherwise. Returns what it
    /// did and, if it committed, the batch's events. With nothing queued it commits nothing.
    pub fn flush(&mut self) -> (FlushOutcome, Option<CommittedEvents>) {
        if self.queue.is_empty() {
            return (FlushOutcome { commands: 0, committed: self.core.failure().is_none() }, None);
        }
        let writes = std::mem::take(&mut self.queue);
        let mut batch = Batch::default();
        let mut results = Vec::with_capacity(writes.len());
        for write in &writes {
            let result = self.core.apply(&write.command, &mut batch);
            if matches!(result, Err(StoreError::NoSpace)) && !self.core.alarms().has(AlarmType::Nospace) {
                let raise = AlarmRequest {
                    action: AlarmAction::Activate as i32,
                    member_id: self.member_id,
                    alarm: AlarmType::Nospace as i32,
                };
                // Its answer goes nowhere: the refused write answers NoSpace itself.
                let _ = self.core.apply(&Command::Alarm(raise), &mut batch);
            }
            results.push(result);
        }
        let commands = writes.len();
        let failed = results.iter().filter(|r| r.is_err()).count();
        // Applied in memory only: nothing of the batch may be readable, watched or answered.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("store::before_commit");
        let started = std::time::Instant::now();
        let committed = self.core.commit(batch);
        // One fsync serves as both etcd's WAL fsync and its backend commit.
        let seconds = started.elapsed().as_secs_f64();
        metrics::histogram!(crate::metric_names::ETCD_DISK_WAL_FSYNC_DURATION_SECONDS).record(seconds);
        metrics::histogram!(crate::metric_names::ETCD_DISK_BACKEND_COMMIT_DURATION_SECONDS).record(seconds);
        metrics::histogram!(crate::metric_names::ACTCD_STORE_BATCH_SIZE).record(commands as f64);
        metrics::counter!(crate::metric_names::ACTCD_STORE_FSYNCS_TOTAL).increment(1);
        metrics::counter!(crate::metric_names::ETCD_SERVER_PROPOSALS_COMMITTED_TOTAL)
            .increment(commands as u64);
        metrics::counter!(crate::metric_names::ETCD_SERVER_PROPOSALS_APPLIED_TOTAL)
            .increment(commands as u64);
        metrics::counter!(crate::metric_names::ETCD_SERVER_PROPOSALS_FAILED_TOTAL).increment(failed as u64);
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => crate::metric_names::ActorKind::Store.label())
            .set(self.core.lease_heap_bytes() as f64);
        let outcome = FlushOutcome { commands, committed: committed.is_ok() };
        for (write, result) in writes.into_iter().zip(results) {
            let answer = match &committed {
                Ok(_) => result,
                Err(err) => Err(err.clone()),
            };
            // A client that went away no longer wants its answer; its write stands.
            let _ = write.reply.send(answer);
        }
        #[cfg(feature = "failpoints")]
        fail::fail_point!("store::before_notify");
        (outcome, committed.ok())
    }
}

#[cfg(test)]
mod tests {
    //! On the in-memory engine: what is under test is the batching and the answers, not the disk.
    use super::*;
    use std::sync::Arc;

    use actcd_proto::etcdserverpb::{AlarmMember, PutRequest, RangeRequest};
    use bytes::Bytes;
    use tokio::sync::oneshot;

    use crate::store::mvcc::command::{Command, CommandResponse};
    use crate::store::mvcc::engine::{Family, ScanVisitor, WriteSet};
    use crate::store::mvcc::error::StoreError;
    use crate::store::mvcc::memory::MemoryEngine;
    use crate::store::mvcc::writer::StoreConfig;

    fn put(key: &'static str) -> (Write, oneshot::Receiver<Result<CommandResponse, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let command =
            Command::Put(PutRequest { key: Bytes::from_static(key.as_bytes()), ..Default::default() });
        (Write { command, reply }, answer)
    }

    #[test]
    fn a_flush_commits_all_queued_writes_at_once_and_answers_after() {
        let core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core, DEFAULT_BATCH_LIMIT, 1);

        let mut answers = Vec::new();
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            let (write, mut answer) = put(key);
            let queued = if i == 0 { Queued::FirstOfBatch } else { Queued::Joined };
            assert_eq!(group.push(write), queued, "only the first write of a batch schedules a flush");
            assert!(answer.try_recv().is_err(), "no answer before the commit");
            answers.push(answer);
        }
        assert_eq!(view.revision(), 1, "nothing visible before the commit");

        let (outcome, events) = group.flush();
        assert_eq!(outcome, FlushOutcome { commands: 3, committed: true });
        let events = events.expect("events");
        assert_eq!((events.prev_revision, events.revision, events.events.len()), (1, 4, 3));
        let revisions: Vec<i64> = answers
            .into_iter()
            .map(|mut a| match a.try_recv() {
                Ok(Ok(CommandResponse::Put(p))) => p.header.map(|h| h.revision).unwrap_or(0),
                other => panic!("unexpected answer {other:?}"),
            })
            .collect();
        assert_eq!(revisions, [2, 3, 4]);
        assert_eq!(view.revision(), 4);
        let all = RangeRequest {
            key: Bytes::from_static(b"\0"),
            range_end: Bytes::from_static(b"\0"),
            ..Default::default()
        };
        assert_eq!(view.range(&all).map(|r| r.count), Ok(3));

        // A failed command in a batch answers its own error; the others still commit.
        let (bad, mut bad_answer) = put("");
        let (good, mut good_answer) = put("d");
        group.push(bad);
        group.push(good);
        assert_eq!(group.flush().0, FlushOutcome { commands: 2, committed: true });
        assert!(matches!(bad_answer.try_recv(), Ok(Err(StoreError::EmptyKey))));
        assert!(matches!(good_answer.try_recv(), Ok(Ok(_))));
        assert_eq!(view.revision(), 5);
    }

    #[test]
    fn a_batch_at_its_limit_is_committed_at_once_and_the_flush_after_it_is_empty() {
        let core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core, 2, 1);
        let (a, _) = put("a");
        let (b, _) = put("b");
        let (c, _) = put("c");
        assert_eq!(group.push(a), Queued::FirstOfBatch);
        assert_eq!(group.push(b), Queued::Full);
        assert_eq!(group.flush().0, FlushOutcome { commands: 2, committed: true });
        assert_eq!(view.revision(), 3);
        // The flush scheduled for the first batch: nothing is queued, nothing is committed.
        let (outcome, events) = group.flush();
        assert_eq!(outcome, FlushOutcome { commands: 0, committed: true });
        assert!(events.is_none());
        assert_eq!(group.push(c), Queued::FirstOfBatch);
        assert_eq!(group.flush().0.commands, 1);
        assert_eq!(view.revision(), 4);

        // A limit of one commits every write alone.
        let mut single = GroupCommit::new(group.core, 0, 1);
        let (d, _) = put("d");
        assert_eq!(single.push(d), Queued::Full);
    }

    #[test]
    fn a_write_over_the_quota_raises_nospace_in_its_own_batch() {
        let config = StoreConfig { quota_bytes: 1024, ..StoreConfig::default() };
        let core = StoreCore::open(MemoryEngine::new(), config).expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core, DEFAULT_BATCH_LIMIT, 42);
        let (reply, mut answer) = oneshot::channel();
        let big = PutRequest { key: "k".into(), value: vec![0; 2048].into(), ..Default::default() };
        group.push(Write { command: Command::Put(big), reply });
        let (small, mut small_answer) = put("small");
        group.push(small);
        assert_eq!(view.alarms(AlarmType::None), Ok(vec![]));
        group.flush();
        assert!(matches!(answer.try_recv(), Ok(Err(StoreError::NoSpace))));
        let raised = AlarmMember { member_id: 42, alarm: AlarmType::Nospace as i32 };
        assert_eq!(view.alarms(AlarmType::None), Ok(vec![raised]), "durable and listed with the batch");
        assert!(
            matches!(small_answer.try_recv(), Ok(Err(StoreError::NoSpace))),
            "a put after the alarm in the same batch is refused by it"
        );
    }

    /// An engine whose commits fail while `failing` is set, as after an fsync error.
    struct FailingEngine {
        inner: MemoryEngine,
        failing: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Engine for FailingEngine {
        fn commit(&self, set: &WriteSet) -> Result<(), StoreError> {
            if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::Storage("IO error: fdatasync: Input/output error".into()));
            }
            self.inner.commit(set)
        }
        fn get_many(&self, family: Family, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
            self.inner.get_many(family, keys)
        }
        fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(family, key)
        }
        fn scan(&self, family: Family, from: &[u8], visit: &mut ScanVisitor<'_>) -> Result<(), StoreError> {
            self.inner.scan(family, from, visit)
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
    }

    #[test]
    fn a_failed_commit_answers_no_write_and_stops_the_writer_for_good() {
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let engine = FailingEngine { inner: MemoryEngine::new(), failing: Arc::clone(&failing) };
        let core = StoreCore::open(engine, StoreConfig::default()).expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core, DEFAULT_BATCH_LIMIT, 1);
        let (first, _) = put("a");
        group.push(first);
        assert!(group.flush().0.committed);

        failing.store(true, std::sync::atomic::Ordering::SeqCst);
        let (b, mut b_answer) = put("b");
        let (c, mut c_answer) = put("c");
        group.push(b);
        group.push(c);
        let (outcome, events) = group.flush();
        assert_eq!(outcome, FlushOutcome { commands: 2, committed: false });
        assert!(events.is_none(), "nothing of the failed batch goes to watchers");
        for answer in [&mut b_answer, &mut c_answer] {
            assert!(
                matches!(answer.try_recv(), Ok(Err(StoreError::Stopped(_)))),
                "no write of the batch is acknowledged"
            );
        }
        assert_eq!(view.revision(), 2, "readers never see the failed batch");
        assert!(group.core().failure().is_some_and(|r| r.contains("fdatasync")));

        // Even once the disk works again, the writer takes nothing more until a restart.
        failing.store(false, std::sync::atomic::Ordering::SeqCst);
        let (d, mut d_answer) = put("d");
        group.push(d);
        assert!(!group.flush().0.committed);
        assert!(matches!(d_answer.try_recv(), Ok(Err(StoreError::Stopped(_)))));
        assert_eq!(view.revision(), 2);
    }
}
