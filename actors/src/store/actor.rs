//! The StoreActor: the actix shell around [`GroupCommit`] that turns a stream of write
//! requests into group commits, and publishes each committed batch's events.
//!
//! How batches form: a [`Write`] only queues its command and, if no flush is pending, schedules
//! one with `ctx.notify`. Actix drains every message already in the mailbox before it runs a
//! notified item, so all writes that arrived while the previous batch was fsyncing are applied
//! and committed together: one WriteBatch, one fsync, then every answer. A burst that fills a
//! batch to its limit (etcd's `--backend-batch-limit`) is committed then and there, and the
//! scheduled flush takes what came after.

use std::sync::Arc;

use actix::{Actor, ActorContext, AsyncContext, Context, Handler, Message, Recipient};
use tokio::sync::oneshot;

use super::group_commit::{GroupCommit, Queued};
use super::messages::{Committed, LeaseKeys, LeaseList, Write};
use super::mvcc::engine::Engine;
use super::mvcc::writer::StoreCore;

/// Commits the queued writes. Private: only the actor schedules its own flushes.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// The single writer, on its own arbiter thread so that its fsyncs block nothing else.
pub struct StoreActor<E: Engine> {
    group: GroupCommit<E>,
    /// Mailbox capacity ([`crate::mailboxes::Mailboxes::store`]): a full mailbox parks each
    /// sender until there is room, so a burst of writers waits instead of growing memory.
    mailbox: usize,
    /// Where committed events go (the watch root).
    subscriber: Option<Recipient<Committed>>,
    /// Told once, with the reason, when a commit fails and the writer stops.
    fail_stop: Option<oneshot::Sender<String>>,
}

impl<E: Engine> StoreActor<E> {
    /// Wraps the opened store of member `member_id`; committed events go to `subscriber`. A
    /// batch takes at most `batch_limit` writes.
    pub fn new(
        core: StoreCore<E>,
        member_id: u64,
        subscriber: Option<Recipient<Committed>>,
        mailbox: usize,
        batch_limit: usize,
    ) -> Self {
        Self { group: GroupCommit::new(core, batch_limit, member_id), mailbox, subscriber, fail_stop: None }
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
        ctx.set_mailbox_capacity(self.mailbox);
    }
}

impl<E: Engine> Handler<Write> for StoreActor<E> {
    type Result = ();

    fn handle(&mut self, msg: Write, ctx: &mut Self::Context) {
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Store.label()).increment(1.0);
        match self.group.push(msg) {
            Queued::FirstOfBatch => ctx.notify(Flush),
            Queued::Joined => {}
            Queued::Full => self.flush(ctx),
        }
    }
}

impl<E: Engine> Handler<Flush> for StoreActor<E> {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) {
        self.flush(ctx);
    }
}

impl<E: Engine> StoreActor<E> {
    fn flush(&mut self, ctx: &mut Context<Self>) {
        let (outcome, committed) = self.group.flush();
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Store.label()).decrement(outcome.commands as f64);
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
