//! `txn-mixed [key] [end]`: transactions of one range or one put, `--rw-ratio` reads per write,
//! the reads and the writes reported separately.

use super::range::serializable;
use super::txn_put::put_op;
use crate::conn::{channel_for, connect, kv_client, Conn};
use crate::keys::{check_key_space, random_bytes, varint_key, Rng};
use crate::output::Out;
use crate::report::Recorder;
use crate::runner::{run_load, OpError, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::{RangeRequest, RequestOp, TxnRequest};
use bytes::Bytes;
use clap::Args;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `txn-mixed [key] [end]`'s flags.
#[derive(Debug, Clone, Args)]
pub struct TxnMixedArgs {
    /// Start of the read range (default: the first key).
    pub key: Option<String>,
    /// End of the read range (default: --end-key, else every key from `key` on).
    pub end: Option<String>,
    /// Key size of mixed txn.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of mixed txn.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Maximum txns per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of txn requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Read operation range end key (as the `end` argument).
    #[arg(long)]
    pub end_key: Option<String>,
    /// Read operation range result limit.
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Linearizable (l) or Serializable (s).
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Read/write ops ratio.
    #[arg(long, default_value_t = 1.0)]
    pub rw_ratio: f64,
}

impl TxnMixedArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
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

    /// Runs `txn-mixed`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(read) = stop.check(mixed_read_request(&a)) else { return };
        out.print(if serializable(&a.consistency).unwrap_or(false) {
            "bench with serializable range\n"
        } else {
            "bench with linearizable range\n"
        });
        let Some(channels) = connect(settings, stop, out, &["txn-mixed-read", "txn-mixed-write"]).await
        else {
            return;
        };
        let value = Bytes::from(random_bytes(a.val_size));
        let reads = Arc::new(AtomicU64::new(0));
        let writes = Arc::new(AtomicU64::new(0));
        let workers: Vec<MixedWorker> = (0..settings.clients)
            .map(|c| MixedWorker {
                kv: kv_client(channel_for(&channels, c)),
                rng: Rng::new(),
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
}

const READ: usize = 0;
const WRITE: usize = 1;

struct MixedWorker {
    kv: KvClient<Conn>,
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
        let (report, req) = if self.rng.f64() < self.read_share {
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
