//! What the apiserver does on a clock: counts every type's objects (the object-count tracker,
//! once a minute), polls Status (the storage size monitor), and compacts through
//! `compact_rev_key` (pkg/storage/etcd3/compact.go): every interval, a Txn that bumps the key if
//! its version is still the one last seen (Put of the revision to compact, else Get), and, when
//! it won and a revision was seen an interval ago, Compact to that revision. With several
//! apiservers only the one whose CAS wins compacts; the others adopt the key's version.

use super::resources::{prefix, watched};
use super::store;
use crate::conn::{status_text, Conn};
use crate::report::Recorder;
use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::response_op::Response;
use actcd_proto::etcdserverpb::{
    CompactionRequest, Compare, PutRequest, RangeRequest, RequestOp, StatusRequest, TxnRequest,
};
use bytes::Bytes;
use serde::Serialize;
use std::future::Future;
use std::time::{Duration, Instant};

/// The key the apiservers agree on compaction through.
pub const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";

/// A clock that ticks every `period` until `end`, the first tick after `first`.
pub struct Ticker {
    tick: tokio::time::Interval,
    end: Instant,
}

impl Ticker {
    /// `None` when `period` is 0 (never).
    pub fn new(first: Duration, period: Duration, end: Instant) -> Option<Self> {
        if period.is_zero() {
            return None;
        }
        let mut tick = tokio::time::interval_at((Instant::now() + first).into(), period);
        // A slow round delays the next rather than bunching them up.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Some(Self { tick, end })
    }

    /// Waits for the next tick; false at `end` (a tick due after it is not waited for).
    pub async fn next(&mut self) -> bool {
        tokio::select! {
            _ = self.tick.tick() => Instant::now() < self.end,
            _ = tokio::time::sleep_until(self.end.into()) => false,
        }
    }
}

/// Records `call`'s outcome under `bound` into `rec`; its value on success.
pub async fn timed<T, E: Into<String>>(
    rec: &Recorder,
    bound: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Option<T> {
    let sent = Instant::now();
    match tokio::time::timeout(bound, call).await {
        Ok(Ok(v)) => {
            rec.ok(0, sent, Instant::now());
            Some(v)
        }
        Ok(Err(e)) => {
            rec.err(0, &e.into());
            None
        }
        Err(_) => {
            rec.err(0, &format!("request timed out after {bound:?} (--request-timeout)"));
            None
        }
    }
}

/// One round of counts: a count_only Range of every type.
pub async fn count_all(kv: &mut KvClient<Conn>, rec: &Recorder, bound: Duration) {
    for resource in watched() {
        let p = prefix(&resource);
        timed(rec, bound, async { store::count(kv, &p).await.map_err(|e| e.text) }).await;
    }
}

/// One Status poll.
pub async fn status(m: &mut MaintenanceClient<Conn>, rec: &Recorder, bound: Duration) {
    timed(rec, bound, async { m.status(StatusRequest {}).await.map_err(|s| status_text(&s)) }).await;
}

/// The compactor's state between rounds, and what it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Compactor {
    /// The version of compact_rev_key last seen (the compare of the next CAS).
    pub version: i64,
    /// The revision seen at the last round: the next round compacts to it.
    pub revision: i64,
    /// Compactions done.
    pub compactions: u64,
    /// The revision last compacted to.
    pub compacted_to: i64,
    /// Rounds whose CAS lost (another apiserver, or a previous run, moved the key).
    pub lost: u64,
}

impl Compactor {
    /// One round, recorded (CAS and Compact together) in `rec`.
    pub async fn round(&mut self, kv: &mut KvClient<Conn>, rec: &Recorder, bound: Duration) {
        let outcome = timed(rec, bound, self.cas_and_compact(kv)).await;
        if let Some((version, revision)) = outcome {
            self.version = version;
            self.revision = revision;
        }
    }

    /// The CAS, then Compact when it won; the version and revision to keep.
    async fn cas_and_compact(&mut self, kv: &mut KvClient<Conn>) -> Result<(i64, i64), String> {
        let key = Bytes::from_static(COMPACT_REV_KEY);
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Version as i32,
                key: key.clone(),
                range_end: Bytes::new(),
                target_union: Some(TargetUnion::Version(self.version)),
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: Bytes::from(self.revision.to_string()),
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest { key, ..Default::default() })),
            }],
        };
        let r = kv.txn(txn).await.map_err(|s| status_text(&s))?.into_inner();
        let now = r.header.as_ref().map_or(0, |h| h.revision);
        if !r.succeeded {
            self.lost += 1;
            let version = match r.responses.first().and_then(|o| o.response.as_ref()) {
                Some(Response::ResponseRange(range)) => range.kvs.first().map_or(0, |kv| kv.version),
                _ => 0,
            };
            return Ok((version, now));
        }
        if self.revision > 0 {
            kv.compact(CompactionRequest { revision: self.revision, physical: false })
                .await
                .map_err(|s| status_text(&s))?;
            self.compactions += 1;
            self.compacted_to = self.revision;
        }
        Ok((self.version + 1, now))
    }
}
