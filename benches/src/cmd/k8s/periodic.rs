//! What the apiserver does on a clock: counts every type's objects (the object-count tracker,
//! once a minute), polls Status (the storage size monitor), and compacts through
//! `compact_rev_key` (pkg/storage/etcd3/compact.go): every interval, a Txn that bumps the key if
//! its version is still the one last seen (Put of the revision to compact, else Get), and, when
//! it won and a revision was seen an interval ago, Compact to that revision. With several
//! apiservers only the one whose CAS wins compacts; the others adopt the key's version.

use super::resources::{prefix, watched};
use super::store;
use crate::cmd::{compare, put_op, range_of, range_op};
use crate::conn::{bounded, Conn, OpError};
use crate::report::Recorder;
use actcd_proto::etcdserverpb::compare::{CompareResult, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{CompactionRequest, RangeRequest, StatusRequest, TxnRequest};
use bytes::Bytes;
use serde::Serialize;
use std::future::Future;
use std::time::{Duration, Instant};

/// Runs `round` every `period` (never for 0), the first after `first`, until `end` (a round
/// due after it is not waited for); a slow round delays the next rather than bunching them up.
pub async fn every(first: Duration, period: Duration, end: Instant, mut round: impl AsyncFnMut()) {
    if period.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval_at((Instant::now() + first).into(), period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => if Instant::now() >= end { return },
            _ = tokio::time::sleep_until(end.into()) => return,
        }
        round().await;
    }
}

async fn timed<T, E: Into<OpError>>(
    rec: &Recorder,
    bound: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, OpError> {
    rec.record(Instant::now(), bounded(bound, call).await)
}

/// One round of counts: a count_only Range of every type.
pub async fn count_all(kv: &mut KvClient<Conn>, rec: &Recorder, bound: Duration) {
    for resource in watched() {
        let _ = timed(rec, bound, store::count(kv, &prefix(&resource))).await;
    }
}

pub async fn status(m: &mut MaintenanceClient<Conn>, rec: &Recorder, bound: Duration) {
    let _ = timed(rec, bound, m.status(StatusRequest {})).await;
}

/// The compactor's state between rounds, and what it did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Compactor {
    /// The version of compact_rev_key last seen (the compare of the next CAS).
    pub version: i64,
    /// The revision seen at the last round: the next round compacts to it.
    pub revision: i64,
    pub compactions: u64,
    pub compacted_to: i64,
    /// Rounds whose CAS lost (another apiserver, or a previous run, moved the key).
    pub lost: u64,
}

impl Compactor {
    /// One round, recorded (CAS and Compact together) in `rec`.
    pub async fn round(&mut self, kv: &mut KvClient<Conn>, rec: &Recorder, bound: Duration) {
        if let Ok((version, revision)) = timed(rec, bound, self.cas_and_compact(kv)).await {
            (self.version, self.revision) = (version, revision);
        }
    }

    /// The CAS, then Compact when it won; the version and revision to keep.
    async fn cas_and_compact(&mut self, kv: &mut KvClient<Conn>) -> Result<(i64, i64), OpError> {
        let key = Bytes::from_static(b"compact_rev_key");
        let txn = TxnRequest {
            compare: vec![compare(&key, CompareResult::Equal, TargetUnion::Version(self.version))],
            success: vec![put_op(key.clone(), self.revision.to_string().into())],
            failure: vec![range_op(RangeRequest { key, ..Default::default() })],
        };
        let r = kv.txn(txn).await?.into_inner();
        let now = r.header.as_ref().map_or(0, |h| h.revision);
        if !r.succeeded {
            self.lost += 1;
            let version =
                range_of(r.responses.first()).and_then(|g| g.kvs.first()).map_or(0, |kv| kv.version);
            return Ok((version, now));
        }
        if self.revision > 0 {
            kv.compact(CompactionRequest { revision: self.revision, physical: false }).await?;
            self.compactions += 1;
            self.compacted_to = self.revision;
        }
        Ok((self.version + 1, now))
    }
}
