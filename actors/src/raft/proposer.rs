//! The Proposer: where writes enter the Raft log. It batches the writes that arrive while
//! earlier proposals are in flight into one [`Proposal`] (one log entry, one append, one
//! fsync), proposes it through openraft and hands each write its own answer once the entry is
//! committed and applied.
//!
//! How batches form, as the single node's group commit formed them: a [`Write`] only queues;
//! the first write into an idle queue schedules a flush with `ctx.notify`, and actix drains
//! every message already in the mailbox before it runs a notified item. A flush proposes at
//! most `batch_limit` writes (etcd's `--backend-batch-limit`), and at most
//! [`MAX_IN_FLIGHT`] proposals are in flight: the rest wait in the queue and form the next
//! batch when one comes back. The queue is bounded by the mailbox: a full mailbox parks each
//! sender until there is room, so openraft's own unbounded API channel never holds more than
//! [`MAX_IN_FLIGHT`] entries of ours. On a follower the batch goes to the leader whole
//! ([`Route::propose`]), so forwarding keeps the batching.

use actix::prelude::*;

use super::route::Route;
use super::types::{Applied, Proposal};
use crate::auth::Caller;
use crate::lease::messages::RevokeExpired;
use crate::store::messages::Write;
use crate::store::{Command, StoreError};
use actcd_proto::etcdserverpb::LeaseRevokeRequest;

/// etcd's default backend batch limit: the most writes one entry takes.
pub const DEFAULT_BATCH_LIMIT: usize = 10_000;

/// Proposals in flight at once: one appending while the one before it is applied.
pub const MAX_IN_FLIGHT: usize = 2;

/// The writes waiting for a proposal, and the proposals in flight. A plain struct: tests
/// drive it without actix.
#[derive(Default)]
pub struct ProposalQueue {
    queue: Vec<Write>,
    in_flight: usize,
    limit: usize,
    /// A flush is scheduled and has not run yet.
    scheduled: bool,
}

impl ProposalQueue {
    /// A queue proposing at most `limit` writes per entry (at least one).
    pub fn new(limit: usize) -> Self {
        Self { limit: limit.max(1), ..Self::default() }
    }

    /// Queues a write; true if a flush must be scheduled for it.
    pub fn push(&mut self, write: Write) -> bool {
        self.queue.push(write);
        let schedule = !self.scheduled && self.in_flight < MAX_IN_FLIGHT;
        self.scheduled |= schedule;
        schedule
    }

    /// The next batch to propose, if one may be proposed now.
    pub fn take(&mut self) -> Option<Vec<Write>> {
        self.scheduled = false;
        if self.queue.is_empty() || self.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        let rest = self.queue.split_off(self.queue.len().min(self.limit));
        self.in_flight += 1;
        Some(std::mem::replace(&mut self.queue, rest))
    }

    /// A proposal came back; true if a flush must be scheduled for what queued meanwhile.
    pub fn done(&mut self) -> bool {
        self.in_flight -= 1;
        let schedule = !self.scheduled && !self.queue.is_empty();
        self.scheduled |= schedule;
        schedule
    }
}

/// Flushes the queue. Private: only the actor schedules its own flushes.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

/// The actor every write goes through.
pub struct Proposer {
    route: Route,
    queue: ProposalQueue,
    /// Mailbox capacity ([`crate::mailboxes::Mailboxes::store`]): a full mailbox parks each
    /// sender until there is room, so a burst of writers waits instead of growing memory.
    mailbox: usize,
}

impl Proposer {
    /// Proposes through `route`, at most `batch_limit` writes per entry.
    pub fn new(route: Route, mailbox: usize, batch_limit: usize) -> Self {
        Self { route, queue: ProposalQueue::new(batch_limit), mailbox }
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        let Some(writes) = self.queue.take() else {
            return;
        };
        let (commands, replies): (Vec<_>, Vec<_>) = writes.into_iter().map(|w| (w.command, w.reply)).unzip();
        let proposal = Proposal::new(self.route.member_id(), commands);
        let route = self.route.clone();
        let count = replies.len();
        let propose = async move { route.propose(proposal).await };
        ctx.spawn(propose.into_actor(self).map(move |result, actor, ctx| {
            metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Store.label()).decrement(count as f64);
            metrics::gauge!(crate::metric_names::ETCD_SERVER_PROPOSALS_PENDING).decrement(count as f64);
            match result {
                Ok(Applied(answers)) => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        // A client that went away no longer wants its answer; its write stands.
                        let _ = reply.send(answer);
                    }
                }
                Err(err) => {
                    metrics::counter!(crate::metric_names::ETCD_SERVER_PROPOSALS_FAILED_TOTAL).increment(count as u64);
                    for reply in replies {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
            if actor.queue.done() {
                ctx.notify(Flush);
            }
        }));
    }
}

impl Actor for Proposer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(self.mailbox);
    }
}

impl Handler<Write> for Proposer {
    type Result = ();

    fn handle(&mut self, msg: Write, ctx: &mut Self::Context) {
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Store.label()).increment(1.0);
        metrics::gauge!(crate::metric_names::ETCD_SERVER_PROPOSALS_PENDING).increment(1.0);
        if self.queue.push(msg) {
            ctx.notify(Flush);
        }
    }
}

/// Expired leases are revoked by a leader that has just confirmed it leads (a read-index
/// round with a quorum), in one entry of their own, never forwarded: a member that lost the
/// leadership revokes nothing, and the new leader's lessor has given every lease its full TTL.
impl Handler<RevokeExpired> for Proposer {
    type Result = ResponseFuture<Result<Vec<Result<(), StoreError>>, StoreError>>;

    fn handle(&mut self, msg: RevokeExpired, _: &mut Self::Context) -> Self::Result {
        let route = self.route.clone();
        Box::pin(async move {
            route.read_index_as_leader().await?;
            let commands = msg
                .0
                .into_iter()
                .map(|id| Command::LeaseRevoke(LeaseRevokeRequest { id }).from_caller(Caller::Lessor))
                .collect();
            let proposal = Proposal::new(route.member_id(), commands);
            let Applied(answers) = route.propose_as_leader(proposal).await?.applied;
            Ok(answers.into_iter().map(|a| a.map(|_| ())).collect())
        })
    }
}

impl Handler<Flush> for Proposer {
    type Result = ();

    fn handle(&mut self, _: Flush, ctx: &mut Self::Context) {
        self.flush(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Command;
    use actcd_proto::etcdserverpb::PutRequest;
    use tokio::sync::oneshot;

    fn write() -> Write {
        let (reply, _) = oneshot::channel();
        Write { command: Command::Put(PutRequest::default()), reply }
    }

    #[test]
    fn writes_wait_for_a_free_slot_and_leave_in_batches_of_the_limit() {
        let mut queue = ProposalQueue::new(3);
        assert!(queue.push(write()), "the first write into an idle queue schedules a flush");
        assert!(!queue.push(write()), "one flush is scheduled at a time");
        assert_eq!(queue.take().map(|b| b.len()), Some(2));
        for _ in 0..5 {
            queue.push(write());
        }
        assert_eq!(queue.take().map(|b| b.len()), Some(3), "a batch takes at most the limit");
        assert!(!queue.push(write()), "both slots are taken: no flush until one comes back");
        assert!(queue.take().is_none());
        assert_eq!(queue.queue.len(), 3);
        assert!(queue.done(), "a returning proposal schedules the writes that queued meanwhile");
        assert_eq!(queue.take().map(|b| b.len()), Some(3));
        assert!(!queue.done(), "nothing waits");
        assert!(!queue.done());
        assert!(queue.take().is_none());
    }
}
