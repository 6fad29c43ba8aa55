//! The StoreActor: the actix shell around [`StoreCore`] that turns a stream of write requests
//! into group commits. The logic lives in [`GroupCommit`], a plain struct tests drive directly.
//!
//! How batches form: a [`Write`] only queues its command and, if no flush is pending, schedules
//! one with `ctx.notify`. Actix drains every message already in the mailbox before it runs a
//! notified item, so all writes that arrived while the previous batch was fsyncing are applied
//! and committed together: one WriteBatch, one fsync, then every answer.

use actix::{Actor, ActorContext, AsyncContext, Context, Handler, Message};
use tokio::sync::oneshot;

use crate::store::engine::Engine;
use std::sync::Arc;

use actix::Recipient;

use crate::store::{Batch, Command, CommandResponse, CommittedEvents, StoreCore, StoreError};

/// Mailbox capacity. A full mailbox parks each sender until there is room (actix gives every
/// sender one slot beyond it), so a burst of writers waits instead of growing memory; the
/// number of writers is bounded by the gRPC edge's concurrency limits.
const MAILBOX_CAPACITY: usize = 4096;

/// The answer to a write, sent once the write is durable.
pub type WriteReply = oneshot::Sender<Result<CommandResponse, StoreError>>;

/// A write command and where to send its answer.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Write {
    /// The command.
    pub command: Command,
    /// Receives the answer after the commit (dropped unanswered only if the actor dies).
    pub reply: WriteReply,
}

/// Commits the queued writes.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// Queued writes and the store they are applied to.
pub struct GroupCommit<E> {
    core: StoreCore<E>,
    queue: Vec<Write>,
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
    /// Wraps an opened store.
    pub fn new(core: StoreCore<E>) -> Self {
        Self { core, queue: Vec::new() }
    }

    /// The store.
    pub fn core(&self) -> &StoreCore<E> {
        &self.core
    }

    /// Queues a write; returns true if it is the first of a new batch (a flush must be scheduled).
    pub fn push(&mut self, write: Write) -> bool {
        self.queue.push(write);
        self.queue.len() == 1
    }

    /// Applies every queued write into one batch, commits it, then answers each write: with
    /// its result if the commit succeeded, with the commit's error otherwise. Returns what it
    /// did and, if it committed, the batch's events.
    pub fn flush(&mut self) -> (FlushOutcome, Option<CommittedEvents>) {
        let writes = std::mem::take(&mut self.queue);
        let mut batch = Batch::default();
        let results: Vec<_> = writes.iter().map(|w| self.core.apply(&w.command, &mut batch)).collect();
        let commands = writes.len();
        let failed = results.iter().filter(|r| r.is_err()).count();
        // Applied in memory only: nothing of the batch may be readable, watched or answered.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("store::before_commit");
        let started = std::time::Instant::now();
        let committed = self.core.commit(batch);
        // One fsync serves as both etcd's WAL fsync and its backend commit.
        let seconds = started.elapsed().as_secs_f64();
        metrics::histogram!("etcd_disk_wal_fsync_duration_seconds").record(seconds);
        metrics::histogram!("etcd_disk_backend_commit_duration_seconds").record(seconds);
        metrics::histogram!("actcd_store_batch_size").record(commands as f64);
        metrics::counter!("actcd_store_fsyncs_total").increment(1);
        metrics::counter!("etcd_server_proposals_committed_total").increment(commands as u64);
        metrics::counter!("etcd_server_proposals_applied_total").increment(commands as u64);
        metrics::counter!("etcd_server_proposals_failed_total").increment(failed as u64);
        metrics::gauge!("actcd_actor_heap_bytes", "actor" => "store")
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

/// The events of one committed batch, published to the watch tree after the fsync. Shared,
/// not copied: every subscriber gets the same `Arc`.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Committed(pub Arc<CommittedEvents>);

/// The single writer, on its own arbiter thread so that its fsyncs block nothing else.
pub struct StoreActor<E: Engine> {
    group: GroupCommit<E>,
    /// Where committed events go (the watch root).
    subscriber: Option<Recipient<Committed>>,
    /// Told once, with the reason, when a commit fails and the writer stops.
    fail_stop: Option<oneshot::Sender<String>>,
}

impl<E: Engine> StoreActor<E> {
    /// Wraps an opened store; committed events go to `subscriber`.
    pub fn new(core: StoreCore<E>, subscriber: Option<Recipient<Committed>>) -> Self {
        Self { group: GroupCommit::new(core), subscriber, fail_stop: None }
    }

    /// Sends the reason to `fail_stop` when a commit fails. The process is expected to exit
    /// then, as etcd does on a failed WAL write or fsync: after an fsync error the kernel may
    /// have dropped the dirty pages, so neither the memory nor the disk state can be vouched for.
    pub fn with_fail_stop(mut self, fail_stop: oneshot::Sender<String>) -> Self {
        self.fail_stop = Some(fail_stop);
        self
    }
}

impl<E: Engine> Actor for StoreActor<E> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

impl<E: Engine> Handler<Write> for StoreActor<E> {
    type Result = ();

    fn handle(&mut self, msg: Write, ctx: &mut Self::Context) {
        metrics::gauge!("actcd_actor_mailbox_depth", "actor" => "store").increment(1.0);
        if self.group.push(msg) {
            ctx.notify(Flush);
        }
    }
}

impl<E: Engine> Handler<Flush> for StoreActor<E> {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) {
        let (outcome, committed) = self.group.flush();
        metrics::gauge!("actcd_actor_mailbox_depth", "actor" => "store").decrement(outcome.commands as f64);
        if !outcome.committed {
            let reason = self.group.core().failure().unwrap_or("commit failed").to_owned();
            tracing::error!(commands = outcome.commands, %reason, "the store takes no more writes");
            if let Some(fail_stop) = self.fail_stop.take() {
                let _ = fail_stop.send(reason);
            }
            // Writes still in the mailbox are dropped unanswered: their senders answer
            // "server stopped", and so does every later send to a stopped actor.
            ctx.stop();
            return;
        }
        let (Some(subscriber), Some(events)) = (&self.subscriber, committed) else {
            return;
        };
        if events.revision == events.prev_revision {
            return;
        }
        // Never blocks the writer: when the subscriber's mailbox is full the batch is dropped
        // here, and the watch tree notices the gap in revisions and reads it from storage.
        if let Err(err) = subscriber.try_send(Committed(Arc::new(events))) {
            tracing::debug!(%err, "watch root is behind; it will catch up from storage");
        }
    }
}

/// The keys attached to a lease (None if it does not exist), as of the last commit.
#[derive(Message)]
#[rtype(result = "Option<Vec<Box<[u8]>>>")]
pub struct LeaseKeys(pub i64);

/// Every lease with its granted TTL, as of the last commit.
#[derive(Message)]
#[rtype(result = "Vec<(i64, i64)>")]
pub struct LeaseList;

impl<E: Engine> Handler<LeaseKeys> for StoreActor<E> {
    type Result = Option<Vec<Box<[u8]>>>;

    fn handle(&mut self, msg: LeaseKeys, _: &mut Self::Context) -> Self::Result {
        self.group.core().lease_keys(msg.0)
    }
}

impl<E: Engine> Handler<LeaseList> for StoreActor<E> {
    type Result = Vec<(i64, i64)>;

    fn handle(&mut self, _: LeaseList, _: &mut Self::Context) -> Self::Result {
        self.group.core().lease_list()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};
    use bytes::Bytes;

    use crate::store::{RocksEngine, StoreConfig};

    fn put(key: &'static str) -> (Write, oneshot::Receiver<Result<CommandResponse, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let command =
            Command::Put(PutRequest { key: Bytes::from_static(key.as_bytes()), ..Default::default() });
        (Write { command, reply }, answer)
    }

    #[test]
    fn a_flush_commits_all_queued_writes_at_once_and_answers_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let core = StoreCore::open(RocksEngine::open(dir.path()).expect("engine"), StoreConfig::default())
            .expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core);

        let mut answers = Vec::new();
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            let (write, mut answer) = put(key);
            assert_eq!(group.push(write), i == 0, "only the first write of a batch schedules a flush");
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

    /// RocksDB whose commits fail while `failing` is set, as after an fsync error.
    struct FailingEngine {
        inner: RocksEngine,
        failing: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Engine for FailingEngine {
        fn commit(&self, set: &crate::store::engine::WriteSet) -> Result<(), StoreError> {
            if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(StoreError::Storage("IO error: fdatasync: Input/output error".into()));
            }
            self.inner.commit(set)
        }
        fn get_many(
            &self,
            family: crate::store::engine::Family,
            keys: &[Vec<u8>],
        ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
            self.inner.get_many(family, keys)
        }
        fn get(
            &self,
            family: crate::store::engine::Family,
            key: &[u8],
        ) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(family, key)
        }
        fn scan(
            &self,
            family: crate::store::engine::Family,
            from: &[u8],
            visit: &mut crate::store::engine::ScanVisitor<'_>,
        ) -> Result<(), StoreError> {
            self.inner.scan(family, from, visit)
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
    }

    #[test]
    fn a_failed_commit_answers_no_write_and_stops_the_writer_for_good() {
        let dir = tempfile::tempdir().expect("tempdir");
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let engine = FailingEngine {
            inner: RocksEngine::open(dir.path()).expect("engine"),
            failing: Arc::clone(&failing),
        };
        let core = StoreCore::open(engine, StoreConfig::default()).expect("store");
        let view = core.read_view();
        let mut group = GroupCommit::new(core);
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
