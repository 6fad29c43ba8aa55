//! The Proposer: where writes enter the Raft log. It batches the writes that arrive while
//! earlier proposals are in flight into one [`Proposal`] (one log entry, one append, one
//! fsync), proposes it through openraft and hands each write its own answer once the entry is
//! committed and applied.
//!
//! How batches form, as the single node's group commit formed them: the task takes a write,
//! then every write already waiting in its channel (up to `batch_limit`, etcd's
//! `--backend-batch-limit`), and proposes them as one entry. At most [`MAX_IN_FLIGHT`]
//! proposals are in flight: meanwhile the writes gather in the queue and form the next batch
//! when one comes back. A lone write is proposed at once. The queue holds at most one batch;
//! past it the task stops reading its channel, and a full channel parks each sender until
//! there is room, so openraft's own unbounded API channel never holds more than
//! [`MAX_IN_FLIGHT`] entries of ours. On a follower the batch goes to the leader whole
//! ([`Route::propose`]), so forwarding keeps the batching.
//!
//! Why a tokio task and not an actor on an arbiter of its own: every write crosses it twice,
//! and openraft's core and state machine run on the same runtime as the gRPC handlers. On the
//! runtime, a hand-over between tasks usually stays on the worker that made it; to an
//! arbiter's thread it is a wake-up of another thread each way. A write alone paid about
//! 0.1 ms for those hops (put 1 x 1 with the actor: 1428-1602/s, proposing from the handler:
//! 1703-2020/s on this machine, 2026-12-06).

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;

use super::route::Route;
use super::types::{Applied, Proposal};
use actcd_actors::lease::leader::LeaseRevoker;
use actcd_proto::etcdserverpb::LeaseRevokeRequest;
use actcd_store::auth_store::Caller;
use actcd_store::metric_names::{hot, ActorKind};
use actcd_store::{Command, CommandResponse, StoreError};
use tokio::sync::oneshot;

/// The answer to a write, sent once the write is applied.
pub type WriteReply = oneshot::Sender<Result<CommandResponse, StoreError>>;

/// Answers on their way to the thread their writers wait on.
pub type Answers = Vec<(WriteReply, Result<CommandResponse, StoreError>)>;

/// A write command and where to send its answer: what the gRPC edge and the LeaseActor hand
/// the proposer.
pub struct Write {
    /// The command.
    pub command: Command,
    /// Receives the answer after the apply (dropped unanswered only if the proposer dies).
    pub reply: WriteReply,
    /// The writer's thread, when it has a relay: the answer goes through it.
    pub relay: Option<Relay>,
}

/// Answers bound for one thread: one message per proposal, which a task on that thread hands
/// to its writers. A current-thread runtime (a serving thread) is woken from another thread by
/// an eventfd write for each task woken there, so answering a batch's writers one by one cost a
/// syscall each (put 100 x 1000: 0.80 x the requests a second of the runtime that ran writers
/// and proposer together, with 1.46 x its CPU); through the relay a batch wakes each thread
/// once, and the writers are woken from inside it, which costs no syscall.
#[derive(Clone)]
pub struct Relay(mpsc::Sender<Answers>);

/// Proposals whose answers wait for a relay's task. When it is full the answers go straight to
/// their writers (one wake each, as without a relay): nothing waits and nothing is lost.
const RELAY_BATCHES: usize = 64;

impl Relay {
    /// A relay and its task, which hands out what reaches it; spawn the task on the thread the
    /// writers wait on.
    pub fn new() -> (Self, impl std::future::Future<Output = ()>) {
        let (relay, mut answers) = mpsc::channel::<Answers>(RELAY_BATCHES);
        let task = async move {
            while let Some(batch) = answers.recv().await {
                for (reply, answer) in batch {
                    // A client that went away no longer wants its answer; its write stands.
                    let _ = reply.send(answer);
                }
            }
        };
        (Self(relay), task)
    }

    /// Sends `answers` to the relay's thread, or straight to their writers if it cannot.
    fn deliver(&self, answers: Answers) {
        if let Err(err) = self.0.try_send(answers) {
            let (mpsc::error::TrySendError::Full(answers) | mpsc::error::TrySendError::Closed(answers)) = err;
            for (reply, answer) in answers {
                let _ = reply.send(answer);
            }
        }
    }
}

/// etcd's default backend batch limit: the most writes one entry takes.
pub const DEFAULT_BATCH_LIMIT: usize = 10_000;

/// Proposals in flight at once: one appending while the one before it is applied.
pub const MAX_IN_FLIGHT: usize = 2;

/// The writes waiting for a proposal, and the proposals in flight. A plain struct: tests
/// drive it without a runtime.
#[derive(Default)]
pub struct ProposalQueue {
    queue: Vec<Write>,
    in_flight: usize,
    limit: usize,
}

impl ProposalQueue {
    /// A queue proposing at most `limit` writes per entry (at least one).
    pub fn new(limit: usize) -> Self {
        Self { limit: limit.max(1), ..Self::default() }
    }

    /// Whether another write may queue: at most one batch waits.
    pub fn has_room(&self) -> bool {
        self.queue.len() < self.limit
    }

    /// Queues a write.
    pub fn push(&mut self, write: Write) {
        self.queue.push(write);
    }

    /// The next batch to propose, if one may be proposed now.
    pub fn take(&mut self) -> Option<Vec<Write>> {
        if self.queue.is_empty() || self.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        let rest = self.queue.split_off(self.queue.len().min(self.limit));
        self.in_flight += 1;
        Some(std::mem::replace(&mut self.queue, rest))
    }

    /// A proposal came back: its slot is free for the next batch.
    pub fn done(&mut self) {
        self.in_flight -= 1;
    }

    /// Nothing queued and nothing in flight.
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight == 0
    }
}

/// The handle every write goes through; clones share one proposing task.
#[derive(Clone)]
pub struct Proposer {
    writes: mpsc::Sender<Write>,
}

impl Proposer {
    /// Starts the proposing task on the current tokio runtime: through `route`, at most
    /// `batch_limit` writes per entry, `mailbox` writes waiting in its channel
    /// ([`actcd_actors::mailboxes::Mailboxes::store`]). The task ends when every handle is gone and
    /// what it holds is answered.
    pub fn start(route: Route, mailbox: usize, batch_limit: usize) -> Self {
        let (writes, waiting) = mpsc::channel(mailbox.max(1));
        tokio::spawn(propose_all(route, waiting, ProposalQueue::new(batch_limit)));
        Self { writes }
    }

    /// Hands `write` to the task; waits while its channel is full. Its answer comes on the
    /// write's own reply channel.
    pub async fn submit(&self, write: Write) -> Result<(), StoreError> {
        // Counted before the send: the task may answer it before `send` returns here.
        pending(1.0);
        self.writes.send(write).await.map_err(|_| {
            pending(-1.0);
            StoreError::Stopped("the proposer is gone".into())
        })
    }

    /// Submits `command` and waits for its answer, once it is applied.
    pub async fn write(&self, command: Command) -> Result<CommandResponse, StoreError> {
        self.write_via(command, None).await
    }

    /// [`Proposer::write`], the answer coming through `relay` when there is one.
    pub async fn write_via(
        &self,
        command: Command,
        relay: Option<Relay>,
    ) -> Result<CommandResponse, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.submit(Write { command, reply, relay }).await?;
        answer.await.map_err(|_| StoreError::Stopped("writer dropped the request".into()))?
    }
}

/// The task: takes writes into the queue, proposes batches, answers them as they come back.
async fn propose_all(route: Route, mut waiting: mpsc::Receiver<Write>, mut queue: ProposalQueue) {
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            // Answers first: each frees a slot for the batch that gathered meanwhile.
            biased;
            Some((result, replies)) = in_flight.next(), if !in_flight.is_empty() => {
                answer(result, replies);
                queue.done();
            }
            write = waiting.recv(), if open && queue.has_room() => match write {
                Some(write) => {
                    queue.push(write);
                    // Everything already sent joins this batch.
                    while queue.has_room() {
                        let Ok(write) = waiting.try_recv() else { break };
                        queue.push(write);
                    }
                }
                None => open = false,
            },
            else => {}
        }
        while let Some(writes) = queue.take() {
            let route = route.clone();
            in_flight.push(async move {
                let (commands, replies): (Vec<_>, Vec<_>) =
                    writes.into_iter().map(|w| (w.command, (w.reply, w.relay))).unzip();
                let proposal = Proposal::new(route.member_id(), commands);
                (route.propose(proposal).await, replies)
            });
        }
        if !open && queue.is_idle() {
            return;
        }
    }
}

/// Hands each write of a proposal its answer, or the proposal's error: through its relay,
/// one message per relay, or straight.
fn answer(result: Result<Applied, StoreError>, replies: Vec<(WriteReply, Option<Relay>)>) {
    let count = replies.len();
    pending(-(count as f64));
    let mut answers = match result {
        Ok(Applied(answers)) => answers,
        Err(err) => {
            metrics::counter!(actcd_store::metric_names::ETCD_SERVER_PROPOSALS_FAILED_TOTAL)
                .increment(count as u64);
            vec![Err(err); count]
        }
    }
    .into_iter();
    // A few serving threads at most: a list, not a map.
    let mut relayed: Vec<(Relay, Answers)> = Vec::new();
    for ((reply, relay), answer) in replies.into_iter().zip(answers.by_ref()) {
        match relay {
            None => {
                // A client that went away no longer wants its answer; its write stands.
                let _ = reply.send(answer);
            }
            Some(relay) => match relayed.iter_mut().find(|(r, _)| r.0.same_channel(&relay.0)) {
                Some((_, batch)) => batch.push((reply, answer)),
                None => relayed.push((relay, vec![(reply, answer)])),
            },
        }
    }
    for (relay, batch) in relayed {
        relay.deliver(batch);
    }
}

/// Moves the gauges of writes handed over and not answered yet by `delta`.
fn pending(delta: f64) {
    hot::mailbox_depth(ActorKind::Apply).increment(delta);
    hot::proposals_pending().increment(delta);
}

/// Expired leases are revoked by a leader that has just confirmed it leads (a read-index
/// round with a quorum), in one entry of their own, never forwarded and never queued behind
/// client writes: a member that lost the leadership revokes nothing, and the new leader's
/// lessor has given every lease its full TTL.
impl LeaseRevoker for Route {
    fn revoke_expired(
        &self,
        ids: Vec<i64>,
    ) -> futures::future::BoxFuture<'static, Result<Vec<Result<(), StoreError>>, StoreError>> {
        let route = self.clone();
        Box::pin(async move {
            route.read_index_as_leader().await?;
            let commands = ids
                .into_iter()
                .map(|id| Command::LeaseRevoke(LeaseRevokeRequest { id }).from_caller(Caller::Member))
                .collect();
            let proposal = Proposal::new(route.member_id(), commands);
            let Applied(answers) = route.propose_as_leader(proposal).await?.applied;
            Ok(answers.into_iter().map(|a| a.map(|_| ())).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::PutRequest;
    use actcd_store::Command;

    fn write() -> Write {
        let (reply, _) = oneshot::channel();
        Write { command: Command::Put(PutRequest::default()), reply, relay: None }
    }

    #[test]
    fn writes_wait_for_a_free_slot_and_leave_in_batches_of_the_limit() {
        let mut queue = ProposalQueue::new(3);
        queue.push(write());
        assert_eq!(queue.take().map(|b| b.len()), Some(1), "a lone write leaves at once");
        for _ in 0..3 {
            queue.push(write());
        }
        assert!(!queue.has_room(), "one batch waits at most: the channel holds the rest");
        assert_eq!(queue.take().map(|b| b.len()), Some(3), "a batch takes at most the limit");
        queue.push(write());
        assert!(queue.take().is_none(), "both slots are taken: nothing leaves until one comes back");
        assert!(queue.has_room());
        queue.done();
        assert_eq!(queue.take().map(|b| b.len()), Some(1), "a returning proposal frees a slot");
        assert!(queue.take().is_none(), "nothing waits");
        queue.done();
        queue.done();
        assert!(queue.is_idle());
    }

    #[test]
    fn answers_go_through_their_relay_one_message_a_relay_or_straight_when_it_is_full() {
        let (to_thread, mut on_thread) = mpsc::channel(1);
        let relay = Relay(to_thread);
        let (to_full, _full) = mpsc::channel(1);
        to_full.try_send(Vec::new()).unwrap();
        let full = Relay(to_full);
        let (mut replies, mut waiting) = (Vec::new(), Vec::new());
        for via in [Some(relay.clone()), None, Some(relay), Some(full)] {
            let (reply, answer) = oneshot::channel();
            replies.push((reply, via));
            waiting.push(answer);
        }
        answer(Err(StoreError::Timeout), replies);
        let answered = |w: &mut oneshot::Receiver<_>| matches!(w.try_recv(), Ok(Err(StoreError::Timeout)));
        assert!(answered(&mut waiting[1]), "no relay: answered straight");
        assert!(answered(&mut waiting[3]), "a full relay: answered straight");
        assert!(!answered(&mut waiting[0]) && !answered(&mut waiting[2]), "relayed: not yet");
        let batch = on_thread.try_recv().expect("one message for the relay's two writes");
        assert_eq!(batch.len(), 2);
        assert!(on_thread.try_recv().is_err(), "one message, not one a write");
        for (reply, answer) in batch {
            let _ = reply.send(answer);
        }
        assert!(answered(&mut waiting[0]) && answered(&mut waiting[2]));
    }
}
