//! RocksDB's WAL synced behind the state machine, every [`SYNC_EVERY`] while it writes.
//!
//! The state machine writes RocksDB without fsync: the Raft log holds every entry it applies,
//! and a restart replays the log from the applied id RocksDB kept. While the log shared
//! RocksDB's WAL (before it had segment files of its own), each append's fsync also made the state machine's earlier
//! writes durable. With the log in files of its own, a power loss could take back whatever the
//! kernel had not written back yet (dirty pages expire after 30 s by default), all of it
//! replayed on restart, and a replayed apply decides again where its outcome depends on the
//! disk (the quota reads RocksDB's size estimate). This keeps that window where etcd keeps its
//! own: etcd commits its backend every 100 ms (`--backend-batch-interval`) and replays its WAL
//! past the last commit. A kill -9 loses nothing either way: the page cache keeps the writes.

use std::time::Duration;

use super::fail_stop::FailStop;
use actcd_store::RocksEngine;

/// etcd's default backend batch interval.
pub const SYNC_EVERY: Duration = Duration::from_millis(100);

/// Starts the syncing task on the current tokio runtime; it runs as long as the runtime. A
/// failed sync stops the process through `fail_stop`, as a failed log fsync does.
pub fn start(engine: RocksEngine, fail_stop: FailStop) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SYNC_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut synced = engine.written_sequence();
        loop {
            tick.tick().await;
            // Idle: nothing written since the last sync, no fsync.
            let written = engine.written_sequence();
            if written == synced {
                continue;
            }
            let engine = engine.clone();
            match tokio::task::spawn_blocking(move || engine.sync_wal()).await {
                Ok(Ok(())) => synced = written,
                Ok(Err(err)) => {
                    fail_stop.stop(format!("syncing the state machine's writes failed: {err}"));
                    return;
                }
                // The runtime is shutting down.
                Err(_) => return,
            }
        }
    });
}
