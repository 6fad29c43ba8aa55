//! One row of etcd's storage-memory table, measured from this separate process: load N keys ×
//! versions into the server (transactions of `txn-put`, so that millions of puts take minutes,
//! not hours; each put is still one version of its key), check that the server counts N keys,
//! wait the settle time and read the server's VmRSS.

use super::put::kv_client;
use super::txn;
use crate::cli::TxnPutArgs;
use crate::conn::{dial, status_text};
use crate::procfs::{self, Proc};
use crate::runner::{Out, Settings, Stop};
use crate::storetable::{StoreResult, StoreRow};
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{RangeRequest, StatusRequest};
use bytes::Bytes;
use std::time::Duration;

/// Most puts in one transaction (etcd's default --max-txn-ops is 128).
const MAX_TXN_OPS: u64 = 100;

/// Puts per transaction: the largest count up to [`MAX_TXN_OPS`] that divides the keys, so that
/// every key gets exactly `versions` puts and no transaction holds a key twice.
pub fn txn_ops(keys: u64) -> u64 {
    (1..=MAX_TXN_OPS.min(keys)).rev().find(|ops| keys % ops == 0).unwrap_or(1)
}

/// Loads `row` into the server at `settings.endpoints` (pid `pid`) and reads its RSS.
pub async fn measure(
    settings: &Settings,
    stop: &Stop,
    row: StoreRow,
    pid: u32,
    server: String,
    settle: Duration,
) -> StoreResult {
    let mut r = StoreResult::skipped(row, server, String::new());
    r.skipped = None;
    match procfs::memory(Proc::Pid(pid)) {
        Ok(m) => r.server_rss_idle_kb = m.rss_kb,
        Err(e) => {
            r.failed = Some(e);
            return r;
        }
    }
    let ops = txn_ops(row.keys);
    let out = Out::new("txn-put", settings);
    let load = TxnPutArgs {
        key_size: row.key_size,
        val_size: row.val_size,
        txn_ops: ops,
        rate: 0,
        total: row.puts() / ops,
        key_space_size: row.keys,
    };
    txn::run_put(settings, stop, &out, load).await;
    if let Some(stats) = out.document().reports.first() {
        r.puts_done = stats.requests * ops;
        r.load_secs = stats.total_secs;
        if let Some(e) = stats.error_distribution.first() {
            r.failed =
                Some(format!("{} of {} transactions failed: {}", stats.errors, row.puts() / ops, e.error));
        }
    }
    if let Some(why) = stop.reason() {
        r.failed.get_or_insert(why);
    }
    match count_keys(settings).await {
        Ok((keys, db_size)) => {
            r.keys_counted = keys;
            r.db_size_bytes = db_size;
        }
        Err(e) => {
            r.failed.get_or_insert(e);
        }
    }
    tokio::time::sleep(settle).await;
    match procfs::memory(Proc::Pid(pid)) {
        Ok(m) => {
            r.server_rss_kb = m.rss_kb;
            r.server_hwm_kb = m.hwm_kb;
        }
        Err(e) => {
            r.failed.get_or_insert(format!(
                "the server's memory is not readable after the load (did it die?): {e}"
            ));
        }
    }
    if r.failed.is_none() && r.keys_counted != row.keys {
        r.failed = Some(format!("the server counts {} keys, the row loaded {}", r.keys_counted, row.keys));
    }
    r
}

/// Every key counted by the server (a Range over all keys, count only) and its backend size.
async fn count_keys(settings: &Settings) -> Result<(u64, u64), String> {
    let channel = dial(&settings.endpoints, 1, settings.dial_timeout)
        .await
        .map_err(|e| e.first().map(|e| e.to_string()).unwrap_or_default())?
        .remove(0);
    let all = RangeRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        count_only: true,
        ..Default::default()
    };
    let bound = settings.request_timeout;
    let counted = tokio::time::timeout(bound, kv_client(channel.clone()).range(all))
        .await
        .map_err(|_| format!("counting the keys timed out after {bound:?}"))?
        .map_err(|s| format!("counting the keys: {}", status_text(&s)))?
        .into_inner()
        .count;
    let status = tokio::time::timeout(bound, MaintenanceClient::new(channel).status(StatusRequest {}))
        .await
        .map_err(|_| format!("Status timed out after {bound:?}"))?
        .map_err(|s| format!("Status: {}", status_text(&s)))?
        .into_inner();
    Ok((u64::try_from(counted).unwrap_or(0), u64::try_from(status.db_size).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_divide_the_keys() {
        assert_eq!(txn_ops(1_000_000), 100);
        assert_eq!(txn_ops(2000), 100);
        assert_eq!(txn_ops(7), 7);
        assert_eq!(txn_ops(101), 1);
        assert_eq!(txn_ops(1), 1);
    }
}
