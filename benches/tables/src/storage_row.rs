//! One row of etcd's storage-memory table, measured from this separate process: load N keys ×
//! versions into the server with `put` (sequential key numbers, so every key gets exactly
//! `versions` puts; single puts, as etcd's benchmark sends them: transactions of many puts would
//! inflate etcd's in-memory raft log, which keeps its last 100,000 entries), check that the
//! server counts N keys, wait the settle time and read the server's VmRSS.

use crate::outcome::Outcome;
use crate::storetable::{StoreResult, StoreRow};
use actcd_bench::cmd::put::PutArgs;
use actcd_bench::conn::{bounded, dial_one, kv_client};
use actcd_bench::output::Out;
use actcd_bench::settings::Settings;
use actcd_bench::stop::Stop;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{RangeRequest, StatusRequest};
use bytes::Bytes;
use std::time::Duration;

/// Loads `row` into the server at `settings.endpoints` (pid `pid`) and reads its RSS.
pub async fn measure(
    settings: &Settings,
    stop: &Stop,
    row: StoreRow,
    pid: u32,
    server: String,
    settle: Duration,
) -> StoreResult {
    let mut r = StoreResult::new(row, Outcome::start(server, pid));
    if r.outcome.failed.is_some() {
        return r;
    }
    let out = Out::new("put", settings);
    let load = PutArgs::sequential(row.key_size, row.val_size, row.puts(), row.keys);
    load.run(settings, stop, &out).await;
    if let Some(stats) = out.document().reports.first() {
        r.puts_done = stats.requests;
        r.load_secs = stats.total_secs;
        if let Some(e) = stats.error_distribution.first() {
            r.outcome.fail(format!("{} of {} puts failed: {}", stats.errors, row.puts(), e.error));
        }
    }
    if let Some(why) = stop.reason() {
        r.outcome.fail(why);
    }
    match count_keys(settings).await {
        Ok((keys, db_size)) => {
            r.keys_counted = keys;
            r.db_size_bytes = db_size;
        }
        Err(e) => r.outcome.fail(e),
    }
    tokio::time::sleep(settle).await;
    r.outcome.finish(pid);
    if r.keys_counted != row.keys {
        r.outcome.fail(format!("the server counts {} keys, the row loaded {}", r.keys_counted, row.keys));
    }
    r
}

/// Every key counted by the server (a Range over all keys, count only) and its backend size.
async fn count_keys(settings: &Settings) -> Result<(u64, u64), String> {
    let channel = dial_one(settings).await?;
    let all = RangeRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        count_only: true,
        ..Default::default()
    };
    let bound = settings.request_timeout;
    let counted = bounded(bound, kv_client(channel.clone()).range(all))
        .await
        .map_err(|e| format!("counting the keys: {e}"))?
        .into_inner()
        .count;
    let status = bounded(bound, MaintenanceClient::new(channel).status(StatusRequest {}))
        .await
        .map_err(|e| format!("Status: {e}"))?
        .into_inner();
    Ok((u64::try_from(counted).unwrap_or(0), u64::try_from(status.db_size).unwrap_or(0)))
}
