//! `txn-mixed [key] [end]`: transactions of one range or one put, `--rw-ratio` reads per write,
//! the reads and the writes reported separately.

use super::put::Load;
use super::range::Consistency;
use super::{put_op, range_op};
use crate::conn::{channel_for, connect, kv_client, Conn, OpError};
use crate::keys::{varint_key, Rng};
use crate::output::Out;
use crate::report::Recorder;
use crate::runner::{run_load, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{RangeRequest, TxnRequest};
use bytes::Bytes;
use clap::Args;
use std::future::Future;
use std::sync::Arc;

#[derive(Debug, Clone, Args)]
pub struct TxnMixedArgs {
    /// Start of the read range (default: the first key).
    pub key: Option<String>,
    /// End of the read range (default: --end-key, else every key from `key` on).
    pub end: Option<String>,
    #[command(flatten)]
    pub load: Load,
    /// Read operation range end key (as the `end` argument).
    #[arg(long)]
    pub end_key: Option<String>,
    /// Read operation range result limit.
    #[arg(long, default_value_t = 1000)]
    pub limit: i64,
    /// Linearizable (l) or Serializable (s).
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: Consistency,
    /// Read/write ops ratio.
    #[arg(long, default_value_t = 1.0)]
    pub rw_ratio: f64,
}

impl TxnMixedArgs {
    pub fn validate(&self) -> Result<(), String> {
        let a = self;
        a.load.validate()?;
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

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let read = mixed_read_request(&a);
        let level = if a.consistency == Consistency::S { "serializable" } else { "linearizable" };
        out.print(&format!("bench with {level} range\n"));
        let reports = ["txn-mixed-read", "txn-mixed-write"];
        let Some(channels) = connect(settings, stop, out, &reports).await else { return };
        let value = a.load.value();
        let workers: Vec<MixedWorker> = (0..settings.clients)
            .map(|c| MixedWorker {
                kv: kv_client(channel_for(&channels, c)),
                rng: Rng::new(),
                read_share: a.rw_ratio / (1.0 + a.rw_ratio),
                read: read.clone(),
                load: a.load.clone(),
                value: value.clone(),
            })
            .collect();
        let recs = reports.map(|name| Arc::new(Recorder::new(name, settings.sample)));
        let total = run_load(settings, stop, a.load.plan(), &recs, workers).await;
        for (rec, what) in recs.iter().zip(["Read", "Write"]) {
            // What completed, failures too (etcd counts what it sent: the same but for requests
            // a stop cut off).
            let ops = rec.completed();
            out.extra(&format!("total_{}_ops", what.to_lowercase()), ops);
            out.report(&format!("Total {what} Ops: {ops}\nDetails:"), rec.stats(total), "\n");
        }
    }
}

struct MixedWorker {
    kv: KvClient<Conn>,
    rng: Rng,
    read_share: f64,
    read: TxnRequest,
    load: Load,
    value: Bytes,
}

impl Worker for MixedWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let (report, req) = if self.rng.f64() < self.read_share {
            (0, self.read.clone())
        } else {
            let key = Bytes::from(varint_key(i % self.load.key_space_size, self.load.key_size));
            (1, TxnRequest { success: vec![put_op(key, self.value.clone())], ..Default::default() })
        };
        (report, async move { self.kv.txn(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

/// The read transaction of `txn-mixed`: a range from `key` (default the first key) to `end` /
/// `--end-key` (default: every key from `key` on), at most `--limit` results.
fn mixed_read_request(a: &TxnMixedArgs) -> TxnRequest {
    let start = a.key.as_deref().unwrap_or("").as_bytes();
    let (key, range_end) = match a.end.as_deref().or(a.end_key.as_deref()) {
        Some(end) => (start, end.as_bytes()),
        // `\0` as the end means "every key from `key` on"; an empty start is the first key.
        None if start.is_empty() => (&b"\0"[..], &b"\0"[..]),
        None => (start, &b"\0"[..]),
    };
    let range = RangeRequest {
        key: Bytes::copy_from_slice(key),
        range_end: Bytes::copy_from_slice(range_end),
        limit: a.limit,
        serializable: a.consistency == Consistency::S,
        ..Default::default()
    };
    TxnRequest { success: vec![range_op(range)], ..Default::default() }
}
