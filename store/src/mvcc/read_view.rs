//! The concurrent readers: [`ReadView`], a cheap handle that serves Range, read-only Txn,
//! history and prev_kv reads while the writer works, at the newest durable revision (see
//! [`crate::mvcc::shared`] for why a reader never sees a batch before its fsync, nor waits for one).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use actcd_proto::etcdserverpb::{
    AlarmMember, AlarmType, RangeRequest, RangeResponse, ResponseHeader, TxnRequest, TxnResponse,
};
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use crate::apply::validate;
use crate::backend::codec;
use crate::backend::engine::{Engine, Family};
use crate::error::StoreError;
use crate::mvcc::range::{self, load_from_engine, EngineSource, RangePlan, View};
use crate::mvcc::revision::Revision;
use crate::mvcc::shared::Shared;
use crate::mvcc::txn;

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
    pub(crate) shared: Arc<Shared<E>>,
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

impl<E: Engine> View for Pinned<'_, E> {
    fn current(&self) -> i64 {
        self.current
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        metrics::counter!(crate::metric_names::ETCD_MVCC_RANGE_TOTAL).increment(1);
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
    /// A view over `shared`, for the writer to hand out.
    pub(crate) fn new(shared: Arc<Shared<E>>) -> Self {
        Self { shared }
    }

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
        let loaded = load_from_engine(&self.shared.engine, &[found.mod_revision])?;
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

    /// One page of a range read page by page (KV.RangeStream): at most `limit` keys (0 = no
    /// limit) of `req`'s range at `req.revision` (0: the newest), in key order, with `more` set
    /// when the range holds keys after them, values left out for `keys_only`, and the newest
    /// revision in the header. Sort and revision filters are not applied (RangeStream refuses
    /// them), nor is `count` filled: counting would walk the rest of the range for every page.
    pub fn range_page(&self, req: &RangeRequest, limit: usize) -> Result<RangeResponse, StoreError> {
        validate::check_range(req)?;
        // etcd counts each chunk's read as a range.
        metrics::counter!(crate::metric_names::ETCD_MVCC_RANGE_TOTAL).increment(1);
        let current = self.revision();
        let at = range::read_revision(req.revision, current, self.compacted_revision())?;
        let mut revisions = Vec::new();
        let more = self.shared.read_index()?.page(&req.key, &req.range_end, at, limit, |_, found| {
            revisions.push(found.mod_revision);
        });
        let plan = RangePlan { revisions, count: 0, at_rev: at };
        let mut kvs = range::load_values(&EngineSource(&self.shared.engine), &plan)?;
        // A compaction that overtook the index pass may have dropped what it named.
        if at < self.compacted_revision() {
            return Err(StoreError::Compacted);
        }
        if req.keys_only {
            for kv in &mut kvs {
                kv.value = Default::default();
            }
        }
        Ok(RangeResponse {
            header: Some(ResponseHeader { revision: current, ..Default::default() }),
            kvs,
            more,
            count: 0,
        })
    }

    /// The active alarms of type `alarm` (all for [`AlarmType::None`]), as of the last commit.
    pub fn alarms(&self, alarm: AlarmType) -> Result<Vec<AlarmMember>, StoreError> {
        let alarms =
            self.shared.alarms.read().map_err(|_| StoreError::Stopped("alarm lock poisoned".into()))?;
        Ok(alarms.list(alarm))
    }

    /// The auth state as of the last commit: one consistent state for a whole request.
    pub fn auth(&self) -> Result<Arc<crate::auth_store::AuthState>, StoreError> {
        let auth = self.shared.auth.read().map_err(|_| StoreError::Stopped("auth lock poisoned".into()))?;
        Ok(Arc::clone(&auth))
    }

    /// The user a simple token names, if this member applied its Authenticate and it has not
    /// expired at `now`; the use extends its life.
    pub fn token_user(&self, token: &str, now: std::time::Instant) -> Result<Option<String>, StoreError> {
        let mut tokens =
            self.shared.tokens.lock().map_err(|_| StoreError::Stopped("token lock poisoned".into()))?;
        Ok(tokens.user(token, now))
    }

    /// KV.Txn for a txn that writes nothing ([`txn::is_read_only`]), checked as etcd checks
    /// any txn, at one revision.
    pub fn read_only_txn(&self, req: &TxnRequest, max_txn_ops: usize) -> Result<TxnResponse, StoreError> {
        validate::check_txn(req, max_txn_ops)?;
        txn::run_read_only(&self.pinned(), req)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::apply::command::Command;
    use crate::apply::writer::{StoreConfig, StoreCore};
    use crate::backend::memory::MemoryEngine;
    use crate::mvcc::batch::Batch;
    use actcd_proto::etcdserverpb::{CompactionRequest, PutRequest};
    use bytes::Bytes;

    /// Applies and commits `command`, as one batch.
    pub(in crate::mvcc) fn apply(core: &mut StoreCore<MemoryEngine>, command: Command) {
        let mut batch = Batch::default();
        core.apply(&command, &mut batch).expect("applies");
        core.commit_by_log(batch, core.applied_index() + 1).expect("commits");
    }

    /// A put of `key` = `value`.
    pub(in crate::mvcc) fn put(key: &str, value: &str) -> Command {
        Command::Put(PutRequest {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            ..Default::default()
        })
    }

    /// Pages at a pinned revision: a later write is not seen, the header names the newest
    /// revision, and a compaction past the pinned revision refuses the next page.
    #[test]
    fn pages_read_at_their_revision_until_it_is_compacted() {
        let mut core =
            StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("an empty store opens");
        for key in ["a", "b", "c"] {
            apply(&mut core, put(key, "1"));
        }
        let view = core.read_view();
        let pinned = view.revision();
        let page = |key: &'static str, limit| {
            let req = RangeRequest {
                key: Bytes::from_static(key.as_bytes()),
                range_end: Bytes::from_static(b"\0"),
                revision: pinned,
                keys_only: true,
                ..Default::default()
            };
            view.range_page(&req, limit)
        };
        let first = page("a", 2).expect("a page");
        assert_eq!(first.kvs.iter().map(|kv| &kv.key[..]).collect::<Vec<_>>(), [b"a", b"b"]);
        assert!(first.more && first.count == 0 && first.kvs.iter().all(|kv| kv.value.is_empty()));
        apply(&mut core, put("b", "2"));
        apply(&mut core, put("d", "2"));
        let last = page("b\0", 2).expect("the rest");
        assert_eq!(last.kvs.iter().map(|kv| &kv.key[..]).collect::<Vec<_>>(), [b"c"]);
        assert!(!last.more);
        assert_eq!(last.header.map(|h| h.revision), Some(pinned + 2));
        apply(&mut core, Command::Compact(CompactionRequest { revision: pinned + 1, physical: true }));
        assert_eq!(page("c", 2), Err(StoreError::Compacted));
    }

    #[test]
    fn history_past_the_largest_revision_is_empty_not_corrupt() {
        let core =
            StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("an empty store opens");
        let view = core.read_view();
        for (from, to) in [(Revision::MAX_MAIN + 1, i64::MAX), (i64::MAX, i64::MAX), (5, 3)] {
            let chunk = view.history(from, to, 1024).expect("nothing to read is no error");
            assert!(chunk.events.is_empty());
            assert_eq!(chunk.next, to.saturating_add(1));
        }
    }
}
