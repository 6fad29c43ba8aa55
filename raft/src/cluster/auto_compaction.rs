//! etcd's `--auto-compaction-mode` and `--auto-compaction-retention`: the schedule
//! (`actcd_store::auto_compaction`) ticked on this member's clock, and asked only while
//! this member leads, so that one member compacts a cluster; the compaction goes through the
//! log as a client's Compact would, from the member itself (auth does not apply).

use std::time::Duration;

use crate::proposer::Proposer;
use crate::route::Route;
use actcd_proto::etcdserverpb::CompactionRequest;
use actcd_store::apply::command::WriteRequest;
use actcd_store::auth_store::Caller;
use actcd_store::auto_compaction::{AutoCompaction, Periodic, Revision, REVISION_INTERVAL};
use actcd_store::{Command, ReadView, RocksEngine, StoreError};
use tokio::time::{interval, Instant, MissedTickBehavior};

/// What the schedule reads and writes through.
struct Store {
    route: Route,
    view: ReadView<RocksEngine>,
    writer: Proposer,
}

/// Compacts on `schedule` until the process ends: asks `route` whether this member leads,
/// reads the revisions from `view`, and proposes the compactions through `writer`.
pub async fn run(route: Route, view: ReadView<RocksEngine>, writer: Proposer, schedule: AutoCompaction) {
    let store = Store { route, view, writer };
    match schedule {
        AutoCompaction::Off => {}
        AutoCompaction::Periodic(retention) => periodic(store, retention).await,
        AutoCompaction::Revision(retention) => revision(store, retention).await,
    }
}

fn leads(store: &Store) -> bool {
    store.route.raft().metrics().borrow().current_leader == Some(store.route.member_id())
}

async fn periodic(store: Store, retention: Duration) {
    let mut schedule = Periodic::new(retention, Instant::now().into_std(), store.view.revision());
    let mut ticks = ticker(schedule.sample_interval());
    loop {
        ticks.tick().await;
        let now = Instant::now().into_std();
        if let Some(target) = schedule.tick(now, store.view.revision(), leads(&store)) {
            tracing::info!(revision = target, ?retention, "starting auto periodic compaction");
            if compact(&store, target).await {
                schedule.done(Instant::now().into_std());
            }
        }
    }
}

async fn revision(store: Store, retention: i64) {
    let mut schedule = Revision::new(retention);
    let mut ticks = ticker(REVISION_INTERVAL);
    loop {
        ticks.tick().await;
        if let Some(target) = schedule.tick(store.view.revision(), leads(&store)) {
            tracing::info!(revision = target, retention, "starting auto revision compaction");
            if compact(&store, target).await {
                schedule.done(target);
            }
        }
    }
}

/// A ticker whose first tick is one period from now; a tick missed while a compaction ran is
/// not made up for (etcd waits a whole period after each).
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticks = interval(period);
    ticks.reset();
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks
}

/// Compacts to `target`: true when done, or when a client's compaction went past it.
async fn compact(store: &Store, target: i64) -> bool {
    let request = CompactionRequest { revision: target, physical: false };
    let command = Command::Compact(request).from_caller(Caller::Member);
    match store.writer.write(command).await.and_then(CompactionRequest::response) {
        Ok(_) | Err(StoreError::Compacted) => {
            tracing::info!(revision = target, "completed auto compaction");
            true
        }
        Err(err) => {
            tracing::warn!(revision = target, %err, "failed auto compaction; retried at the next tick");
            false
        }
    }
}
