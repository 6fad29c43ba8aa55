//! The store core: the single writer ([`StoreCore`]) and the concurrent readers ([`ReadView`])
//! over one revision index and one engine.
//!
//! Visibility: the writer updates the index as it applies each command, but readers read at
//! `visible`, the newest revision that is on disk, and the index never shows a revision newer
//! than the one asked for. So a batch's changes appear to readers all at once, after its fsync,
//! and a reader never waits for one.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use actcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, RangeRequest, RangeResponse, ResponseHeader, TxnRequest, TxnResponse,
};
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use super::codec::{self, APPLIED_INDEX_KEY, COMPACTED_KEY, FORMAT_KEY, FORMAT_VERSION};
use super::command::{Command, CommandResponse};
use super::engine::{Engine, Family, WriteSet};
use super::error::StoreError;
use super::index::Index;
use super::lease_index::{LeaseIndex, MAX_LEASE_TTL, MIN_LEASE_TTL};
use super::range::{self, ValueSource};
use super::revision::Revision;
use super::txn::{self, Batch, TxnCtx, View};
use super::validate;

/// Limits the writer enforces.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// etcd's `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// etcd's `--quota-backend-bytes`; writes that would pass it are refused.
    pub quota_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { max_txn_ops: 128, quota_bytes: 2 << 30 }
    }
}

/// etcd's per-put quota overhead, so that quota decisions match etcd's.
const KV_QUOTA_OVERHEAD: u64 = 256;

/// State the writer and the readers share.
struct Shared<E> {
    engine: E,
    /// Written only by the writer and only briefly: readers take it shared for the index pass
    /// of a read, never across an engine read or an fsync.
    index: RwLock<Index>,
    /// Newest durable revision; readers never read past it.
    visible: AtomicI64,
    /// Compaction revision; raised before the index is compacted so overtaken reads notice.
    compacted: AtomicI64,
    /// Engine size after the last commit, for quota checks and Status.
    db_size: AtomicU64,
    /// Commands applied and durable (etcd's applied index).
    applied_index: AtomicU64,
}

impl<E> Shared<E> {
    fn read_index(&self) -> Result<RwLockReadGuard<'_, Index>, StoreError> {
        self.index.read().map_err(|_| StoreError::Stopped("index lock poisoned".into()))
    }

    fn write_index(&self) -> Result<RwLockWriteGuard<'_, Index>, StoreError> {
        self.index.write().map_err(|_| StoreError::Stopped("index lock poisoned".into()))
    }
}

/// The events of one committed batch: every revision in `(prev_revision, revision]`, in order.
/// A consumer that last saw `prev_revision` can apply them directly; one that saw less has a gap
/// to fill from [`ReadView::history`].
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedEvents {
    /// The visible revision before the batch.
    pub prev_revision: i64,
    /// The visible revision after the batch.
    pub revision: i64,
    /// The batch's events (each event's kv.mod_revision is its revision).
    pub events: Vec<Event>,
}

/// Whole revisions of history read back from storage.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HistoryChunk {
    /// Events of revisions `[from, next)`, in order.
    pub events: Vec<Event>,
    /// The first revision not included.
    pub next: i64,
}

/// A cheap, cloneable handle that serves reads concurrently with the writer.
pub struct ReadView<E> {
    shared: Arc<Shared<E>>,
}

impl<E> Clone for ReadView<E> {
    fn clone(&self) -> Self {
        Self { shared: Arc::clone(&self.shared) }
    }
}

/// A read view pinned at one revision, so a multi-range read (a read-only txn) is consistent.
struct Pinned<'a, E> {
    shared: &'a Shared<E>,
    current: i64,
}

struct EngineSource<'a, E>(&'a E);

impl<E: Engine> ValueSource for EngineSource<'_, E> {
    fn load(&self, revisions: &[Revision]) -> Result<Vec<Option<KeyValue>>, StoreError> {
        txn::load_from_engine(self.0, revisions)
    }
}

impl<E: Engine> View for Pinned<'_, E> {
    fn current(&self) -> i64 {
        self.current
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        metrics::counter!("etcd_mvcc_range_total").increment(1);
        let compacted = self.shared.compacted.load(Ordering::Acquire);
        let at = range::read_revision(req.revision, self.current, compacted)?;
        let plan = range::plan_range(&*self.shared.read_index()?, req, at);
        let kvs = range::load_values(&EngineSource(&self.shared.engine), &plan)?;
        // A compaction that overtook the index pass may have dropped what it named.
        if at < self.shared.compacted.load(Ordering::Acquire) {
            return Err(StoreError::Compacted);
        }
        Ok(range::finish_range(req, kvs, plan.count, self.current))
    }
}

impl<E: Engine> ReadView<E> {
    fn pinned(&self) -> Pinned<'_, E> {
        Pinned { shared: &self.shared, current: self.revision() }
    }

    /// The newest durable revision.
    pub fn revision(&self) -> i64 {
        self.shared.visible.load(Ordering::Acquire)
    }

    /// The last compaction revision (0 if never compacted).
    pub fn compacted_revision(&self) -> i64 {
        self.shared.compacted.load(Ordering::Acquire)
    }

    /// Engine size after the last commit.
    pub fn db_size(&self) -> u64 {
        self.shared.db_size.load(Ordering::Relaxed)
    }

    /// The engine's memory and backlog figures, as (metric name, value) pairs.
    pub fn engine_memory(&self) -> Vec<(&'static str, u64)> {
        self.shared.engine.memory_stats()
    }

    /// Re-reads the engine's size after maintenance shrank it (a defragmentation), so quota
    /// checks see the room it made before the next commit.
    pub fn refresh_db_size(&self) {
        self.shared.db_size.store(self.shared.engine.size_bytes(), Ordering::Relaxed);
    }

    /// Commands applied and durable.
    pub fn applied_index(&self) -> u64 {
        self.shared.applied_index.load(Ordering::Acquire)
    }

    /// Keys in the index and the index's estimated heap bytes.
    pub fn index_stats(&self) -> Result<(usize, usize), StoreError> {
        let index = self.shared.read_index()?;
        Ok((index.len(), index.heap_bytes()))
    }

    /// The key's value at `revision` (its latest version at or before it), or `None` when it
    /// did not exist then or that history is compacted: what a watcher's prev_kv needs.
    pub fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError> {
        if revision < self.compacted_revision() {
            return Ok(None);
        }
        let found = self.shared.read_index()?.get(key, revision);
        let Some(found) = found else { return Ok(None) };
        let loaded = txn::load_from_engine(&self.shared.engine, &[found.mod_revision])?;
        Ok(loaded.into_iter().next().flatten())
    }

    /// Reads the events of revisions `from..=to` from storage, whole revisions only, stopping
    /// after the revision that brings the chunk past `max_bytes` (so a chunk is never empty
    /// when there is history to read). Fails with [`StoreError::Compacted`] if `from` is older
    /// than the compaction revision.
    pub fn history(&self, from: i64, to: i64, max_bytes: usize) -> Result<HistoryChunk, StoreError> {
        if from < self.compacted_revision() {
            return Err(StoreError::Compacted);
        }
        let mut chunk = HistoryChunk { events: Vec::new(), next: to.saturating_add(1) };
        // No history is stored past MAX_MAIN: nothing to read, and no such key to start at.
        if from > to || from > Revision::MAX_MAIN {
            return Ok(chunk);
        }
        let mut bytes = 0usize;
        // First revision of the one being read; a chunk ends only between revisions.
        let mut current = from;
        let start = Revision { main: from.max(0), sub: 0 };
        let start_key = start.try_to_key_bytes().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.shared.engine.scan(Family::History, &start_key, &mut |key, value| {
            let record = codec::decode_history(key, value)?;
            let main = record.revision.main;
            if main > to {
                return Ok(false);
            }
            if main > current && bytes >= max_bytes {
                chunk.next = main;
                return Ok(false);
            }
            current = main;
            bytes += key.len() + value.len();
            let kind = if record.tombstone { EventType::Delete } else { EventType::Put };
            chunk.events.push(Event { r#type: kind as i32, kv: Some(record.kv), prev_kv: None });
            Ok(true)
        })?;
        // A compaction that overtook the scan may have removed part of what it read.
        if from < self.compacted_revision() {
            return Err(StoreError::Compacted);
        }
        Ok(chunk)
    }

    /// KV.Range.
    pub fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        validate::check_range(req)?;
        self.pinned().range(req)
    }

    /// KV.Txn for a txn that writes nothing ([`txn::is_read_only`]).
    pub fn read_only_txn(&self, req: &TxnRequest, max_txn_ops: usize) -> Result<TxnResponse, StoreError> {
        validate::check_txn(req, max_txn_ops)?;
        txn::run_read_only(&self.pinned(), req)
    }
}

/// The single writer: applies commands in order into a [`Batch`], then commits the batch with
/// one engine write and one fsync, then makes it visible.
pub struct StoreCore<E> {
    shared: Arc<Shared<E>>,
    config: StoreConfig,
    /// Revision of the last applied command (may be ahead of `visible` until the commit).
    current: i64,
    applied_index: u64,
    /// Set when a commit failed: the writer can no longer vouch for its state (fail-stop).
    failed: Option<String>,
    /// Leases and their keys (writer-owned: only commands change them).
    leases: LeaseIndex,
}

impl<E: Engine> StoreCore<E> {
    /// Opens the store on `engine`, checking the data format and rebuilding the index from
    /// the history records.
    pub fn open(engine: E, config: StoreConfig) -> Result<Self, StoreError> {
        // Numbers read back are checked against what this store writes: a damaged record must
        // refuse the data dir here, not overflow later (a TTL past MAX_LEASE_TTL overflowed
        // the lessor's deadline at start; a negative applied index, its counter).
        let compacted = match engine.get(Family::Meta, COMPACTED_KEY)? {
            Some(v) => match codec::decode_i64(&v)? {
                c @ 0..=Revision::MAX_MAIN => c,
                other => return Err(StoreError::Corrupt(format!("compaction revision {other}"))),
            },
            None => 0,
        };
        let applied_index = match engine.get(Family::Meta, APPLIED_INDEX_KEY)? {
            Some(v) => {
                let index = codec::decode_i64(&v)?;
                u64::try_from(index).map_err(|_| StoreError::Corrupt(format!("applied index {index}")))?
            }
            None => 0,
        };
        let mut leases = LeaseIndex::default();
        engine.scan(Family::Lease, &[], &mut |key, value| {
            let (id, ttl) = (codec::decode_i64(key)?, codec::decode_i64(value)?);
            if id == 0 || !(0..=MAX_LEASE_TTL).contains(&ttl) {
                return Err(StoreError::Corrupt(format!("lease {id} with TTL {ttl}")));
            }
            leases.grant(id, ttl);
            Ok(true)
        })?;
        let mut index = Index::default();
        let mut last = 0;
        // A compaction at exactly a tombstone's revision keeps the tombstone but drops the
        // versions before it; after a restart such a tombstone deletes nothing, so it is
        // dropped here (as etcd's restore does) and its record removed.
        let mut stale = WriteSet::default();
        engine.scan(Family::History, &[], &mut |key, value| {
            let record = codec::decode_history(key, value)?;
            if record.tombstone {
                leases.detach(&record.kv.key);
                if let Err(e) = index.tombstone(&record.kv.key, record.revision) {
                    if record.revision.main > compacted {
                        return Err(StoreError::Corrupt(format!("tombstone without a live key: {e}")));
                    }
                    stale.delete(Family::History, key.to_vec());
                }
            } else {
                leases.attach(&record.kv.key, record.kv.lease);
                let create = Revision { main: record.kv.create_revision, sub: 0 };
                index
                    .restore_put(&record.kv.key, record.revision, create, record.kv.version)
                    .map_err(|e| StoreError::Corrupt(format!("history record out of order: {e}")))?;
            }
            last = record.revision.main;
            Ok(true)
        })?;
        match engine.get(Family::Meta, FORMAT_KEY)? {
            Some(format) if format == FORMAT_VERSION => {}
            Some(other) => {
                return Err(StoreError::Corrupt(format!(
                    "data format {:?} is not {:?}",
                    String::from_utf8_lossy(&other),
                    String::from_utf8_lossy(FORMAT_VERSION)
                )))
            }
            None if last == 0 && compacted == 0 => {
                let mut set = WriteSet::default();
                set.put(Family::Meta, FORMAT_KEY.to_vec(), FORMAT_VERSION.to_vec());
                engine.commit(&set)?;
            }
            None => return Err(StoreError::Corrupt("data has no format record".into())),
        }
        // Replay inserts keys in revision order, which leaves the index's tree nodes half full;
        // a compaction pass rebuilds it densely packed. It removes history only when a crash
        // came between a compaction's durable record and the deletes that follow it (see
        // `commit`): those deletes are redone here.
        for rev in index.compact(compacted) {
            stale.delete(Family::History, rev.to_key_bytes().to_vec());
        }
        if !stale.is_empty() {
            engine.commit(&stale)?;
        }
        // An empty store is at revision 1, so the first write gets revision 2.
        let current = last.max(compacted).max(1);
        let shared = Shared {
            db_size: AtomicU64::new(engine.size_bytes()),
            engine,
            index: RwLock::new(index),
            visible: AtomicI64::new(current),
            compacted: AtomicI64::new(compacted),
            applied_index: AtomicU64::new(applied_index),
        };
        Ok(Self { shared: Arc::new(shared), config, current, applied_index, failed: None, leases })
    }

    /// A handle for concurrent readers.
    pub fn read_view(&self) -> ReadView<E> {
        ReadView { shared: Arc::clone(&self.shared) }
    }

    /// The limits this writer enforces.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Why the writer stopped taking writes, if it did (fail-stop).
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Revision of the last applied command, durable or not.
    pub fn current_revision(&self) -> i64 {
        self.current
    }

    /// Applies one command into `batch`. Its changes become durable and visible at
    /// [`StoreCore::commit`]; its answer must not reach the client before that.
    pub fn apply(&mut self, command: &Command, batch: &mut Batch) -> Result<CommandResponse, StoreError> {
        if let Some(reason) = &self.failed {
            return Err(StoreError::Stopped(reason.clone()));
        }
        self.applied_index += 1;
        batch.commands += 1;
        match command {
            Command::Put(req) => {
                validate::check_put(req)?;
                self.check_quota(KV_QUOTA_OVERHEAD + (req.key.len() + req.value.len()) as u64)?;
                self.in_txn(batch, |ctx| ctx.put(req)).map(CommandResponse::Put)
            }
            Command::DeleteRange(req) => {
                validate::check_delete(req)?;
                self.in_txn(batch, |ctx| ctx.delete(req)).map(CommandResponse::DeleteRange)
            }
            Command::Txn(req) => {
                metrics::counter!("etcd_mvcc_txn_total").increment(1);
                validate::check_txn(req, self.config.max_txn_ops)?;
                self.check_quota(txn_quota_cost(req))?;
                self.in_txn(batch, |ctx| {
                    let decision = txn::decide(ctx, req)?;
                    ctx.check_path(req, &decision)?;
                    ctx.check_fits_one_revision(req, &decision)?;
                    let mut resp = ctx.txn(req, &decision)?;
                    resp.header = Some(ResponseHeader { revision: ctx.read_rev(), ..Default::default() });
                    Ok(resp)
                })
                .map(CommandResponse::Txn)
            }
            Command::Compact(req) => self.compact(req, batch).map(CommandResponse::Compact),
            Command::LeaseGrant(req) => self.lease_grant(req, batch).map(CommandResponse::LeaseGrant),
            Command::LeaseRevoke(req) => self.lease_revoke(req, batch).map(CommandResponse::LeaseRevoke),
        }
    }

    /// Leases and the granted TTL of each.
    pub fn lease_list(&self) -> Vec<(i64, i64)> {
        self.leases.list()
    }

    /// The keys attached to lease `id`, if it exists.
    pub fn lease_keys(&self, id: i64) -> Option<Vec<Box<[u8]>>> {
        self.leases.keys(id)
    }

    /// Estimated heap bytes of the lease index.
    pub fn lease_heap_bytes(&self) -> usize {
        self.leases.heap_bytes()
    }

    fn lease_grant(
        &mut self,
        req: &LeaseGrantRequest,
        batch: &mut Batch,
    ) -> Result<LeaseGrantResponse, StoreError> {
        if req.ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge);
        }
        if req.id == 0 || self.leases.exists(req.id) {
            return Err(StoreError::LeaseExists);
        }
        let ttl = req.ttl.max(MIN_LEASE_TTL);
        batch.writes.put(Family::Lease, codec::encode_i64(req.id), codec::encode_i64(ttl));
        self.leases.grant(req.id, ttl);
        Ok(LeaseGrantResponse {
            header: Some(ResponseHeader { revision: self.current, ..Default::default() }),
            id: req.id,
            ttl,
            error: String::new(),
        })
    }

    fn lease_revoke(
        &mut self,
        req: &LeaseRevokeRequest,
        batch: &mut Batch,
    ) -> Result<LeaseRevokeResponse, StoreError> {
        let keys = self.leases.keys(req.id).ok_or(StoreError::LeaseNotFound)?;
        let revision = self.in_txn(batch, |ctx| {
            ctx.delete_keys(&keys)?;
            Ok(ctx.read_rev())
        })?;
        self.leases.revoke(req.id);
        batch.writes.delete(Family::Lease, codec::encode_i64(req.id));
        Ok(LeaseRevokeResponse { header: Some(ResponseHeader { revision, ..Default::default() }) })
    }

    /// Makes every command applied into `batch` durable (one engine write, one fsync), then
    /// visible to readers, and returns the batch's events for watchers. On failure the writer
    /// stops taking writes.
    pub fn commit(&mut self, mut batch: Batch) -> Result<CommittedEvents, StoreError> {
        if let Some(reason) = &self.failed {
            return Err(StoreError::Stopped(reason.clone()));
        }
        let prev_revision = self.shared.visible.load(Ordering::Acquire);
        if batch.commands == 0 {
            return Ok(CommittedEvents { prev_revision, revision: prev_revision, events: Vec::new() });
        }
        batch.writes.put(
            Family::Meta,
            APPLIED_INDEX_KEY.to_vec(),
            codec::encode_i64(self.applied_index as i64),
        );
        if let Err(err) = self.shared.engine.commit(&batch.writes) {
            // The batch may or may not be on disk (a failed fsync says nothing about what the
            // disk kept), so its writes are answered as etcd's stopping server answers them:
            // unavailable, outcome unknown, never acknowledged.
            let reason = format!("commit failed: {err}");
            self.failed = Some(reason.clone());
            return Err(StoreError::Stopped(reason));
        }
        // Durable, but neither visible nor answered yet.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("store::after_fsync");
        if let Some(revision) = batch.compaction {
            self.finish_compaction(revision)?;
        }
        self.shared.db_size.store(self.shared.engine.size_bytes(), Ordering::Relaxed);
        self.shared.applied_index.store(self.applied_index, Ordering::Release);
        self.shared.visible.store(self.current, Ordering::Release);
        Ok(CommittedEvents { prev_revision, revision: self.current, events: batch.events })
    }

    /// Makes a durable compaction visible: raises the compaction revision (before the index
    /// changes, so overtaken reads notice), drops the compacted revisions from the index and
    /// deletes their history. A crash before those deletes are on disk leaves records that
    /// the next open deletes.
    fn finish_compaction(&mut self, revision: i64) -> Result<(), StoreError> {
        self.shared.compacted.store(revision, Ordering::Release);
        let removed = self.shared.write_index()?.compact(revision);
        let mut deletes = WriteSet::default();
        for rev in removed {
            deletes.delete(Family::History, rev.to_key_bytes().to_vec());
        }
        if deletes.is_empty() {
            return Ok(());
        }
        if let Err(err) = self.shared.engine.commit(&deletes) {
            let reason = format!("commit failed: {err}");
            self.failed = Some(reason.clone());
            return Err(StoreError::Stopped(reason));
        }
        Ok(())
    }

    /// The compaction revision commands of `batch` see: a compaction earlier in the batch
    /// counts, though readers outside the writer do not see it before the commit.
    fn compacted_for(&self, batch: &Batch) -> i64 {
        self.shared.compacted.load(Ordering::Acquire).max(batch.compaction.unwrap_or(0))
    }

    fn check_quota(&self, cost: u64) -> Result<(), StoreError> {
        if self.shared.db_size.load(Ordering::Relaxed) + cost > self.config.quota_bytes {
            return Err(StoreError::NoSpace);
        }
        Ok(())
    }

    fn in_txn<T>(
        &mut self,
        batch: &mut Batch,
        body: impl FnOnce(&mut TxnCtx<'_, E>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let compacted = self.compacted_for(batch);
        let shared = Arc::clone(&self.shared);
        let mut index = shared.write_index()?;
        let mut ctx = TxnCtx {
            index: &mut index,
            leases: &mut self.leases,
            engine: &shared.engine,
            batch,
            begin: self.current,
            compacted,
            changes: 0,
        };
        let result = body(&mut ctx);
        let changed = ctx.changes > 0;
        if result.is_err() && changed {
            // Commands are checked before they change anything; a failure after a change
            // would leave a half-applied command in the index.
            self.failed = Some("a command failed after changing the store".into());
        }
        if changed {
            self.current += 1;
        }
        result
    }

    fn compact(
        &mut self,
        req: &CompactionRequest,
        batch: &mut Batch,
    ) -> Result<CompactionResponse, StoreError> {
        if req.revision <= self.compacted_for(batch) {
            return Err(StoreError::Compacted);
        }
        if req.revision > self.current {
            return Err(StoreError::FutureRevision);
        }
        // Applied at the commit, once this record is durable (see `finish_compaction`).
        batch.compaction = Some(req.revision);
        batch.writes.put(Family::Meta, COMPACTED_KEY.to_vec(), codec::encode_i64(req.revision));
        Ok(CompactionResponse {
            header: Some(ResponseHeader { revision: self.current, ..Default::default() }),
        })
    }
}

/// etcd's quota cost of a txn: the bigger of its two branches' puts.
fn txn_quota_cost(txn: &TxnRequest) -> u64 {
    use actcd_proto::etcdserverpb::request_op::Request;
    fn branch_cost(ops: &[actcd_proto::etcdserverpb::RequestOp]) -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(Request::RequestPut(p)) => KV_QUOTA_OVERHEAD + (p.key.len() + p.value.len()) as u64,
                Some(Request::RequestTxn(t)) => txn_quota_cost(t),
                _ => 0,
            })
            .sum()
    }
    branch_cost(&txn.success).max(branch_cost(&txn.failure))
}

#[cfg(test)]
mod tests {
    //! Regression tests for what the fuzz targets (fuzz/) found, on the in-memory engine.
    use super::*;
    use crate::store::mvcc::memory::MemoryEngine;
    use actcd_proto::etcdserverpb::{request_op, DeleteRangeRequest, PutRequest, RequestOp};
    use bytes::Bytes;

    fn store() -> StoreCore<MemoryEngine> {
        StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("an empty store opens")
    }

    #[test]
    fn history_past_the_largest_revision_is_empty_not_corrupt() {
        let core = store();
        let view = core.read_view();
        for (from, to) in [(Revision::MAX_MAIN + 1, i64::MAX), (i64::MAX, i64::MAX), (5, 3)] {
            let chunk = view.history(from, to, 1024).expect("nothing to read is no error");
            assert!(chunk.events.is_empty());
            assert_eq!(chunk.next, to.saturating_add(1));
        }
    }

    fn open_on(records: &[(Family, &[u8], Vec<u8>)]) -> Result<StoreCore<MemoryEngine>, StoreError> {
        let engine = MemoryEngine::new();
        let mut set = WriteSet::default();
        set.put(Family::Meta, FORMAT_KEY.to_vec(), FORMAT_VERSION.to_vec());
        for (family, key, value) in records {
            set.put(*family, key.to_vec(), value.clone());
        }
        engine.commit(&set)?;
        StoreCore::open(engine, StoreConfig::default())
    }

    /// Found by fuzz/open_store: a negative applied index overflowed its counter at the first
    /// write, and a lease TTL past the largest overflowed the lessor's deadline at start.
    #[test]
    fn out_of_range_numbers_on_disk_refuse_the_data_dir() {
        let lease = 7i64.to_be_bytes();
        for records in [
            vec![(Family::Meta, APPLIED_INDEX_KEY, codec::encode_i64(-1))],
            vec![(Family::Meta, COMPACTED_KEY, codec::encode_i64(-3))],
            vec![(Family::Meta, COMPACTED_KEY, codec::encode_i64(Revision::MAX_MAIN + 1))],
            vec![(Family::Lease, &lease[..], codec::encode_i64(i64::MAX))],
            vec![(Family::Lease, &lease[..], codec::encode_i64(-1))],
            vec![(Family::Lease, &0i64.to_be_bytes()[..], codec::encode_i64(10))],
        ] {
            assert!(matches!(open_on(&records), Err(StoreError::Corrupt(_))), "{records:?}");
        }
        let fine = open_on(&[
            (Family::Meta, APPLIED_INDEX_KEY, codec::encode_i64(5)),
            (Family::Lease, &lease[..], codec::encode_i64(MAX_LEASE_TTL)),
        ])
        .expect("in-range records open");
        assert_eq!(fine.read_view().applied_index(), 5);
        assert_eq!(fine.lease_list(), vec![(7, MAX_LEASE_TTL)]);
    }

    /// Changes that do not fit one revision (`Revision::MAX_SUB` + 1) used to run out half way
    /// and stop the writer: a delete of more keys, a txn whose put came before such a delete, a
    /// revoke of a lease with more keys. Each is refused before it changes anything (a lease
    /// takes no more keys than its revoke can delete), and the writer goes on.
    #[test]
    fn changes_that_do_not_fit_one_revision_are_refused_whole() {
        let mut core = store();
        let limit = Revision::MAX_SUB as usize + 1;
        let mut batch = Batch::default();
        let grant = LeaseGrantRequest { id: 7, ttl: 1000 };
        core.apply(&Command::LeaseGrant(grant), &mut batch).expect("grant");
        let key = |i: usize| -> Bytes { format!("k{i:07}").into() };
        for i in 0..limit {
            let put = PutRequest { key: key(i), lease: 7, ..Default::default() };
            core.apply(&Command::Put(put), &mut batch).expect("put");
            if i % 8192 == 0 {
                core.commit(std::mem::take(&mut batch)).expect("commit");
            }
        }
        let one_more = PutRequest { key: key(limit), lease: 7, ..Default::default() };
        assert_eq!(core.apply(&Command::Put(one_more.clone()), &mut batch), Err(StoreError::TooManyChanges));
        let again = PutRequest { key: key(0), value: "v".into(), lease: 7, ..Default::default() };
        core.apply(&Command::Put(again), &mut batch).expect("a key the lease holds may be put again");
        let unleased = PutRequest { lease: 0, ..one_more };
        core.apply(&Command::Put(unleased), &mut batch).expect("the same key without the lease");
        core.commit(batch).expect("commit");

        let revision = core.current_revision();
        let all = DeleteRangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
        let mut batch = Batch::default();
        assert_eq!(
            core.apply(&Command::DeleteRange(all.clone()), &mut batch),
            Err(StoreError::TooManyChanges)
        );
        let op = |request| RequestOp { request: Some(request) };
        let put_then_delete = TxnRequest {
            success: vec![
                op(request_op::Request::RequestPut(PutRequest { key: "a".into(), ..Default::default() })),
                op(request_op::Request::RequestDeleteRange(all)),
            ],
            ..Default::default()
        };
        let refused = core.apply(&Command::Txn(put_then_delete), &mut batch);
        assert_eq!(refused, Err(StoreError::TooManyChanges));
        assert_eq!(core.current_revision(), revision);

        let revoke = LeaseRevokeRequest { id: 7 };
        core.apply(&Command::LeaseRevoke(revoke), &mut batch)
            .expect("a full lease is revoked in one revision");
        assert_eq!(core.current_revision(), revision + 1);
        let some = DeleteRangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
        let deleted = core.apply(&Command::DeleteRange(some), &mut batch).expect("the writer goes on");
        assert!(matches!(deleted, CommandResponse::DeleteRange(d) if d.deleted == 1));
        core.commit(batch).expect("commit");
    }
}
