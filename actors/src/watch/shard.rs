//! The WatchShard actor: the actix shell around a [`WatcherGroup`].

use actcd_store::metric_names::{hot, ActorKind};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::dev::SendError;
use actix::prelude::*;
use actix::WeakRecipient;

use actcd_proto::watch_reply::WatchReply;

use crate::watch::messages::Committed;
use actcd_store::backend::engine::Engine;
use actcd_store::ReadView;

use super::messages::{OutputQuota, ShardRequest, StreamId, StreamOutput};
use super::watcher_group::catch_up::next_pass_after;
use super::watcher_group::{Delivery, Outbox, SyncLimits, WatcherGroup};

/// How often unsynced watchers are caught up from storage (etcd: 100 ms).
const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// How often a shard checks that committed batches still arrive.
const STALL_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Timing and mailbox of a shard.
#[derive(Debug, Clone, Copy)]
pub struct ShardConfig {
    /// Periodic progress notifications (etcd's --watch-progress-notify-interval, 10 min).
    pub progress_interval: Duration,
    /// Mailbox capacity. Streams wait (`send`) when it is full; the state machine drops batches for a
    /// full shard (`try_send`) and the shard catches up from storage.
    pub mailbox: usize,
}

/// The streams' outboxes, sent to with `try_send`: a full stream never blocks the shard. The
/// quota is the bound that matters (see `OutputQuota`); the stream's mailbox has room above it.
/// Weak addresses, made strong for each delivery: a few allocations per delivery, against
/// ~110 bytes a stream for as long as it lives.
#[derive(Default)]
struct Outboxes(HashMap<StreamId, (WeakRecipient<StreamOutput>, OutputQuota)>);

impl Outbox for Outboxes {
    fn deliver(&mut self, stream: StreamId, responses: Vec<WatchReply>) -> Delivery {
        let Some((outbox, quota)) = self.0.get(&stream) else { return Delivery::Closed };
        let Some(outbox) = outbox.upgrade() else {
            self.0.remove(&stream);
            return Delivery::Closed;
        };
        if !quota.try_take() {
            return Delivery::Full;
        }
        // Counted as pending (etcd's pending events) until the stream is done with it; a send
        // that fails hands the message back and dropping it counts it out again.
        match outbox.try_send(StreamOutput::new(responses)) {
            Ok(()) => Delivery::Sent,
            Err(SendError::Full(_)) => {
                quota.give_back();
                Delivery::Full
            }
            Err(SendError::Closed(_)) => {
                self.0.remove(&stream);
                Delivery::Closed
            }
        }
    }
}

/// What a shard last added to the process-wide watch gauges, so it can publish deltas (the
/// shards share those gauges).
#[derive(Default)]
struct Published {
    watchers: f64,
    streams: f64,
    slow: f64,
}

/// One shard of the watch tree.
pub struct WatchShard<E: Engine> {
    index: usize,
    published: Published,
    group: WatcherGroup,
    outboxes: Outboxes,
    view: ReadView<E>,
    config: ShardConfig,
    sync_scheduled: bool,
}

impl<E: Engine> WatchShard<E> {
    /// Shard number `index`, reading history through `view`.
    pub fn new(index: usize, view: ReadView<E>, config: ShardConfig) -> Self {
        let group = WatcherGroup::new(view.revision());
        let published = Published::default();
        Self { index, published, group, outboxes: Outboxes::default(), view, config, sync_scheduled: false }
    }

    /// Publishes this shard's figures: its own heap gauge, and its share of the totals.
    fn publish(&mut self) {
        let shard = self.index.to_string();
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::WatchShard.label(), "shard" => shard)
            .set(self.group.heap_bytes() as f64);
        let now = Published {
            watchers: self.group.len() as f64,
            streams: self.group.stream_count() as f64,
            slow: self.group.unsynced_len() as f64,
        };
        for name in [
            actcd_store::metric_names::ETCD_DEBUGGING_MVCC_WATCHER_TOTAL,
            actcd_store::metric_names::ACTCD_WATCHES,
        ] {
            metrics::gauge!(name).increment(now.watchers - self.published.watchers);
        }
        metrics::gauge!(actcd_store::metric_names::ETCD_DEBUGGING_MVCC_WATCH_STREAM_TOTAL)
            .increment(now.streams - self.published.streams);
        metrics::gauge!(actcd_store::metric_names::ETCD_DEBUGGING_MVCC_SLOW_WATCHER_TOTAL)
            .increment(now.slow - self.published.slow);
        self.published = now;
    }

    /// One catch-up pass, and the next one scheduled at once if passes are making progress
    /// ([`next_pass_after`]).
    fn sync(&mut self, ctx: &mut Context<Self>) {
        let started = Instant::now();
        let moved = self.group.sync(&self.view, &mut self.outboxes, SyncLimits::default());
        if let Some(wait) = next_pass_after(moved, self.group.unsynced_len(), started.elapsed()) {
            if !self.sync_scheduled {
                self.sync_scheduled = true;
                ctx.run_later(wait, |shard, ctx| {
                    shard.sync_scheduled = false;
                    shard.sync(ctx);
                });
            }
        }
    }

    /// Schedules one catch-up pass after the messages already queued (many wake-ups, one pass).
    fn sync_soon(&mut self, ctx: &mut Context<Self>) {
        if !self.sync_scheduled {
            self.sync_scheduled = true;
            ctx.notify(SyncSoon);
        }
    }
}

impl<E: Engine> Actor for WatchShard<E> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(self.config.mailbox);
        // Registered at 0 so the series exist before anything is pending.
        hot::pending_events().increment(0.0);
        for actor in [ActorKind::Apply, ActorKind::WatchShard, ActorKind::Stream] {
            hot::mailbox_depth(actor).increment(0.0);
        }
        ctx.run_interval(SYNC_INTERVAL, |shard, ctx| shard.sync(ctx));
        ctx.run_interval(STALL_CHECK_INTERVAL, |shard, _| {
            shard.group.check_stalled(shard.view.revision());
            shard.group.trim();
            shard.publish();
        });
        ctx.run_interval(self.config.progress_interval, |shard, _| {
            shard.group.progress_tick(&mut shard.outboxes)
        });
    }
}

impl<E: Engine> Handler<Committed> for WatchShard<E> {
    type Result = ();

    fn handle(&mut self, msg: Committed, _: &mut Self::Context) {
        hot::mailbox_depth(ActorKind::WatchShard).decrement(1.0);
        self.group.on_committed(&msg.0, &self.view, &mut self.outboxes);
    }
}

/// Runs a catch-up pass soon, without waiting for the next tick.
#[derive(Message)]
#[rtype(result = "()")]
struct SyncSoon;

impl<E: Engine> Handler<SyncSoon> for WatchShard<E> {
    type Result = ();

    fn handle(&mut self, _: SyncSoon, ctx: &mut Self::Context) {
        self.sync_scheduled = false;
        self.sync(ctx);
    }
}

impl<E: Engine> Handler<ShardRequest> for WatchShard<E> {
    type Result = ();

    fn handle(&mut self, msg: ShardRequest, ctx: &mut Self::Context) {
        match msg {
            ShardRequest::Register { stream, outbox, quota } => {
                self.outboxes.0.insert(stream, (outbox, quota));
            }
            ShardRequest::Add(spec) => {
                let behind = spec.start_revision <= self.group.processed();
                self.group.add(&spec);
                if behind {
                    self.sync_soon(ctx);
                }
            }
            ShardRequest::Room => self.sync_soon(ctx),
            ShardRequest::Cancel { stream, watch_id } => {
                self.group.cancel(stream, watch_id);
            }
            ShardRequest::Progress { stream, at } => {
                self.group.request_progress(stream, at, &mut self.outboxes)
            }
            ShardRequest::RemoveStream(stream) => {
                self.group.remove_stream(stream);
                self.outboxes.0.remove(&stream);
            }
        }
    }
}
