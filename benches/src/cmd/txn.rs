//! `txn-put` (transactions of `--txn-ops` puts) and `txn-mixed` (transactions of one range or one
//! put, `--rw-ratio` reads per write, reported separately).

use super::put::kv_client;
use super::{channel_for, check_key_space, connect, serializable};
use crate::cli::{TxnMixedArgs, TxnPutArgs};
use crate::keys::{varint_key, Rng};
use crate::report::Recorder;
use crate::runner::{run_load, OpError, Out, Plan, Settings, Stop, Worker};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::{PutRequest, RangeRequest, RequestOp, TxnRequest};
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::transport::Channel;

/// Checks `txn-put`'s flags.
pub fn validate_put(a: &TxnPutArgs) -> Result<(), String> {
    check_key_space(a.key_size, a.key_space_size)?;
    if a.txn_ops == 0 {
        return Err("--txn-ops must be at least 1".to_string());
    }
    if a.txn_ops > a.key_space_size {
        return Err(format!(
            "expected --txn-ops no larger than --key-space-size, got txn-ops({}) key-space-size({})",
            a.txn_ops, a.key_space_size
        ));
    }
    Ok(())
}

/// Checks `txn-mixed`'s flags.
pub fn validate_mixed(a: &TxnMixedArgs) -> Result<(), String> {
    check_key_space(a.key_size, a.key_space_size)?;
    serializable(&a.consistency)?;
    if !(a.rw_ratio.is_finite() && a.rw_ratio >= 0.0) {
        return Err(format!("--rw-ratio must be a number >= 0, got {}", a.rw_ratio));
    }
    if a.limit < 0 {
        return Err(format!("--limit must not be negative, got {}", a.limit));
    }
    if a.end.is_some() && a.end_key.is_some() {
        return Err("give the read range's end either as an argument or as --end-key".to_string());
    }
    Ok(())
}

fn put_op(key: Bytes, value: Bytes) -> RequestOp {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key, value, ..Default::default() })) }
}

/// The transaction `txn-put` sends as request `i`: `ops` puts of keys `(i·ops + j) mod space`.
pub fn txn_put_request(i: u64, ops: u64, space: u64, key_size: usize, value: &Bytes) -> TxnRequest {
    TxnRequest {
        success: (0..ops)
            .map(|j| {
                let n = (i.wrapping_mul(ops).wrapping_add(j)) % space;
                put_op(Bytes::from(varint_key(n, key_size)), value.clone())
            })
            .collect(),
        ..Default::default()
    }
}

struct TxnPutWorker {
    kv: KvClient<Channel>,
    ops: u64,
    space: u64,
    key_size: usize,
    value: Bytes,
}

impl Worker for TxnPutWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let req = txn_put_request(i, self.ops, self.space, self.key_size, &self.value);
        (0, async move { self.kv.txn(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

/// Runs `txn-put`.
pub async fn run_put(settings: &Settings, stop: &Stop, out: &Out, a: TxnPutArgs) {
    let Some(channels) = connect(settings, stop, out, &["txn-put"]).await else {
        return;
    };
    let value = Bytes::from(Rng::seeded(0).bytes(a.val_size));
    let workers: Vec<TxnPutWorker> = (0..settings.clients)
        .map(|c| TxnPutWorker {
            kv: kv_client(channel_for(&channels, c)),
            ops: a.txn_ops,
            space: a.key_space_size,
            key_size: a.key_size,
            value: value.clone(),
        })
        .collect();
    let rec = Arc::new(Recorder::new("txn-put", settings.clients, settings.sample));
    let total =
        run_load(settings, stop, Plan::new(a.total, a.rate), std::slice::from_ref(&rec), workers).await;
    out.report("", rec.stats(total), "\n");
}

const READ: usize = 0;
const WRITE: usize = 1;

struct MixedWorker {
    kv: KvClient<Channel>,
    rng: Rng,
    read_share: f64,
    read: TxnRequest,
    space: u64,
    key_size: usize,
    value: Bytes,
    reads: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
}

impl Worker for MixedWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let (report, req) = if self.rng.unit() < self.read_share {
            self.reads.fetch_add(1, Ordering::Relaxed);
            (READ, self.read.clone())
        } else {
            self.writes.fetch_add(1, Ordering::Relaxed);
            let key = Bytes::from(varint_key(i % self.space, self.key_size));
            (WRITE, TxnRequest { success: vec![put_op(key, self.value.clone())], ..Default::default() })
        };
        (report, async move { self.kv.txn(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

/// The read transaction of `txn-mixed`: a range from `key` (default the first key) to `end` /
/// `--end-key` (default: every key from `key` on), at most `--limit` results.
pub fn mixed_read_request(a: &TxnMixedArgs) -> Result<TxnRequest, String> {
    let start = a.key.as_deref().unwrap_or("");
    let end = a.end.as_deref().or(a.end_key.as_deref());
    let (key, range_end) = match end {
        Some(end) => (start.as_bytes().to_vec(), end.as_bytes().to_vec()),
        // `\0` as the end means "every key from `key` on"; an empty start is the first key.
        None if start.is_empty() => (vec![0], vec![0]),
        None => (start.as_bytes().to_vec(), vec![0]),
    };
    Ok(TxnRequest {
        success: vec![RequestOp {
            request: Some(Request::RequestRange(RangeRequest {
                key: Bytes::from(key),
                range_end: Bytes::from(range_end),
                limit: a.limit,
                serializable: serializable(&a.consistency)?,
                ..Default::default()
            })),
        }],
        ..Default::default()
    })
}

/// Runs `txn-mixed`.
pub async fn run_mixed(settings: &Settings, stop: &Stop, out: &Out, a: TxnMixedArgs) {
    let read = match mixed_read_request(&a) {
        Ok(r) => r,
        Err(e) => {
            stop.stop(e);
            return;
        }
    };
    out.print(if serializable(&a.consistency).unwrap_or(false) {
        "bench with serializable range\n"
    } else {
        "bench with linearizable range\n"
    });
    let Some(channels) = connect(settings, stop, out, &["txn-mixed-read", "txn-mixed-write"]).await else {
        return;
    };
    let value = Bytes::from(Rng::seeded(0).bytes(a.val_size));
    let reads = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let workers: Vec<MixedWorker> = (0..settings.clients)
        .map(|c| MixedWorker {
            kv: kv_client(channel_for(&channels, c)),
            rng: Rng::seeded(c as u64 + 1),
            read_share: a.rw_ratio / (1.0 + a.rw_ratio),
            read: read.clone(),
            space: a.key_space_size,
            key_size: a.key_size,
            value: value.clone(),
            reads: reads.clone(),
            writes: writes.clone(),
        })
        .collect();
    let recs = [
        Arc::new(Recorder::new("txn-mixed-read", settings.clients, settings.sample)),
        Arc::new(Recorder::new("txn-mixed-write", settings.clients, settings.sample)),
    ];
    let total = run_load(settings, stop, Plan::new(a.total, a.rate), &recs, workers).await;
    let (r, w) = (reads.load(Ordering::Relaxed), writes.load(Ordering::Relaxed));
    out.extra("total_read_ops", r.into());
    out.extra("total_write_ops", w.into());
    out.report(&format!("Total Read Ops: {r}\nDetails:"), recs[READ].stats(total), "\n");
    out.report(&format!("Total Write Ops: {w}\nDetails:"), recs[WRITE].stats(total), "\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_put_keys_walk_the_key_space() {
        let v = Bytes::from_static(b"v");
        let t = txn_put_request(3, 2, 5, 8, &v);
        let keys: Vec<Vec<u8>> = t
            .success
            .iter()
            .filter_map(|op| match &op.request {
                Some(Request::RequestPut(p)) => Some(p.key.to_vec()),
                _ => None,
            })
            .collect();
        // i=3, ops=2: key numbers 6 % 5 = 1 and 7 % 5 = 2.
        assert_eq!(keys, vec![varint_key(1, 8), varint_key(2, 8)]);
    }
}
