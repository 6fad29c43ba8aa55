//! Put and delete range: the changes every write command makes (a Put, a DeleteRange, the ops
//! of a Txn's taken path, a revoked lease's deletes), through one [`WriteTxn`].
//!
//! Every write command runs as one transaction at revision `begin + 1`: each change takes the
//! next sub-revision, reads see the changes made so far, and the store revision moves only if
//! something changed. A change writes its history record, updates the index and the lease's
//! keys, and records its event; nothing of it is durable or visible before the batch commits.

use bytes::Bytes;

use actcd_proto::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    ResponseHeader,
};
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};

use crate::backend::codec::encode_history_value;
use crate::backend::engine::{Engine, Family};
use crate::error::StoreError;
use crate::lease_store::index::LeaseIndex;
use crate::mvcc::batch::{Batch, OverlaySource};
use crate::mvcc::index::Index;
use crate::mvcc::range::{self, ValueSource, View};
use crate::mvcc::revision::Revision;

/// One write transaction at revision `begin + 1`.
pub struct WriteTxn<'a, E: Engine> {
    /// The index, locked for writing for the whole transaction.
    pub index: &'a mut Index,
    /// Leases and their keys.
    pub leases: &'a mut LeaseIndex,
    /// Where committed values live.
    pub engine: &'a E,
    /// The batch the changes go into.
    pub batch: &'a mut Batch,
    /// The store revision before this transaction.
    pub begin: i64,
    /// The compaction revision.
    pub compacted: i64,
    /// Changes made so far (the next sub-revision).
    pub changes: i64,
}

impl<E: Engine> View for WriteTxn<'_, E> {
    fn current(&self) -> i64 {
        self.read_rev()
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        metrics::counter!(crate::metric_names::ETCD_MVCC_RANGE_TOTAL).increment(1);
        let cur = self.read_rev();
        let at = range::read_revision(req.revision, cur, self.compacted)?;
        let plan = range::plan_range(self.index, req, at);
        let kvs = range::load_values(&self.source(), &plan)?;
        Ok(range::finish_range(req, kvs, plan.count, cur))
    }
}

impl<E: Engine> WriteTxn<'_, E> {
    /// The revision the transaction's reads see: its own changes once it has made some.
    pub fn read_rev(&self) -> i64 {
        if self.changes > 0 {
            self.begin + 1
        } else {
            self.begin
        }
    }

    fn source(&self) -> OverlaySource<'_, E> {
        OverlaySource { overlay: &self.batch.overlay, engine: self.engine }
    }

    fn next_revision(&mut self) -> Result<Revision, StoreError> {
        let rev = Revision { main: self.begin + 1, sub: self.changes };
        rev.pack(false).map_err(|_| StoreError::TooManyChanges)?;
        self.changes += 1;
        Ok(rev)
    }

    pub(crate) fn live(&self, key: &[u8]) -> Result<Option<KeyValue>, StoreError> {
        let req = RangeRequest { key: Bytes::copy_from_slice(key), ..Default::default() };
        Ok(View::range(self, &req)?.kvs.into_iter().next())
    }

    /// Applies a put.
    pub fn put(&mut self, req: &PutRequest) -> Result<PutResponse, StoreError> {
        crate::metric_names::hot::mvcc_puts().increment(1);
        self.check_lease(req.lease)?;
        // A revoke deletes all of a lease's keys in one revision: it must stay possible.
        if self.leases.is_full_for(&req.key, req.lease, Revision::MAX_SUB as usize + 1) {
            return Err(StoreError::TooManyChanges);
        }
        let prev =
            if req.ignore_value || req.ignore_lease || req.prev_kv { self.live(&req.key)? } else { None };
        if (req.ignore_value || req.ignore_lease) && prev.is_none() {
            return Err(StoreError::KeyNotFound);
        }
        let value = match (&prev, req.ignore_value) {
            (Some(p), true) => p.value.clone(),
            _ => req.value.clone(),
        };
        let lease = match (&prev, req.ignore_lease) {
            (Some(p), true) => p.lease,
            _ => req.lease,
        };
        let existing = self.index.get(&req.key, self.read_rev());
        let rev = self.next_revision()?;
        let (create_revision, version) = match existing {
            Some(at) => (at.create_revision.main, at.version + 1),
            None => (rev.main, 1),
        };
        let kv =
            KeyValue { key: req.key.clone(), create_revision, mod_revision: rev.main, version, value, lease };
        self.record(rev, false, kv);
        self.index.put(&req.key, rev);
        self.leases.attach(&req.key, lease);
        Ok(PutResponse {
            header: Some(ResponseHeader { revision: rev.main, ..Default::default() }),
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    /// Applies a delete of a key or range.
    pub fn delete(&mut self, req: &DeleteRangeRequest) -> Result<DeleteRangeResponse, StoreError> {
        metrics::counter!(crate::metric_names::ETCD_MVCC_DELETE_TOTAL).increment(1);
        let at = self.read_rev();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut revisions = Vec::new();
        self.index.range(&req.key, &req.range_end, at, 0, |key, found| {
            keys.push(key.to_vec());
            revisions.push(found.mod_revision);
        });
        // One revision holds at most MAX_SUB + 1 changes. Running out half way would be a
        // failure after a change, which stops the writer: refuse the delete before it starts.
        if self.changes.saturating_add(keys.len() as i64) > Revision::MAX_SUB + 1 {
            return Err(StoreError::TooManyChanges);
        }
        let prev_kvs = if req.prev_kv {
            self.source()
                .load(&revisions)?
                .into_iter()
                .map(|kv| kv.ok_or(StoreError::Compacted))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        for key in &keys {
            self.tombstone(key)?;
        }
        Ok(DeleteRangeResponse {
            header: Some(ResponseHeader { revision: self.read_rev(), ..Default::default() }),
            deleted: keys.len() as i64,
            prev_kvs,
        })
    }

    pub(crate) fn check_lease(&self, lease: i64) -> Result<(), StoreError> {
        if lease != 0 && !self.leases.exists(lease) {
            return Err(StoreError::LeaseNotFound);
        }
        Ok(())
    }

    /// Deletes one live key at the next sub-revision: a tombstone record, the index, its lease.
    fn tombstone(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let rev = self.next_revision()?;
        let kv = KeyValue { key: Bytes::copy_from_slice(key), mod_revision: rev.main, ..Default::default() };
        self.record(rev, true, kv);
        self.index.tombstone(key, rev).map_err(|e| StoreError::Corrupt(format!("index tombstone: {e}")))?;
        self.leases.detach(key);
        Ok(())
    }

    /// Deletes `keys` (those live now), each at the next sub-revision: a revoked lease's keys.
    pub fn delete_keys(&mut self, keys: &[Box<[u8]>]) -> Result<(), StoreError> {
        for key in keys {
            if self.index.get(key, self.read_rev()).is_none() {
                continue;
            }
            self.tombstone(key)?;
        }
        Ok(())
    }

    fn record(&mut self, rev: Revision, tombstone: bool, kv: KeyValue) {
        self.batch.writes.put(
            Family::History,
            rev.to_key_bytes().to_vec(),
            encode_history_value(tombstone, &kv),
        );
        let kind = if tombstone { EventType::Delete } else { EventType::Put };
        self.batch.events.push(Event { r#type: kind as i32, kv: Some(kv.clone()), prev_kv: None });
        self.batch.overlay.insert(rev, kv);
    }
}

#[cfg(test)]
mod tests {
    //! The write logic on its own: a [`WriteTxn`] over a bare index, lease index and in-memory
    //! engine, with no writer around it, so each test sees exactly what one change records.
    use super::*;
    use crate::backend::codec;
    use crate::backend::engine::{WriteOp, WriteSet};
    use crate::backend::memory::MemoryEngine;

    /// What a writer holds between commands, and the revision it is at.
    struct Fixture {
        index: Index,
        leases: LeaseIndex,
        engine: MemoryEngine,
        batch: Batch,
        /// The store revision: an empty store is at 1.
        current: i64,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                index: Index::default(),
                leases: LeaseIndex::default(),
                engine: MemoryEngine::new(),
                batch: Batch::default(),
                current: 1,
            }
        }

        /// Runs `body` as one write transaction, moving the revision on if it changed
        /// anything, as the writer does.
        fn txn<T>(&mut self, body: impl FnOnce(&mut WriteTxn<'_, MemoryEngine>) -> T) -> T {
            let mut ctx = WriteTxn {
                index: &mut self.index,
                leases: &mut self.leases,
                engine: &self.engine,
                batch: &mut self.batch,
                begin: self.current,
                compacted: 0,
                changes: 0,
            };
            let out = body(&mut ctx);
            if ctx.changes > 0 {
                self.current += 1;
            }
            out
        }

        fn put(&mut self, req: PutRequest) -> Result<PutResponse, StoreError> {
            self.txn(|ctx| ctx.put(&req))
        }

        fn delete(&mut self, req: DeleteRangeRequest) -> Result<DeleteRangeResponse, StoreError> {
            self.txn(|ctx| ctx.delete(&req))
        }

        /// Writes the batch to the engine and starts a new one, as a commit does.
        fn commit(&mut self) {
            let batch = std::mem::take(&mut self.batch);
            self.engine.commit(&batch.writes).expect("commit");
        }

        /// (type, key, create, mod, version, lease) of each event recorded since the last call.
        fn take_events(&mut self) -> Vec<(EventType, String, i64, i64, i64, i64)> {
            std::mem::take(&mut self.batch.events)
                .into_iter()
                .map(|ev| {
                    let kv = ev.kv.unwrap_or_default();
                    let kind = if ev.r#type == EventType::Delete as i32 {
                        EventType::Delete
                    } else {
                        EventType::Put
                    };
                    let key = String::from_utf8_lossy(&kv.key).into_owned();
                    (kind, key, kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                })
                .collect()
        }

        fn lease_keys(&self, id: i64) -> Vec<String> {
            let keys = self.leases.keys(id).unwrap_or_default();
            keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect()
        }
    }

    fn put(key: &'static str, value: &'static str) -> PutRequest {
        PutRequest { key: key.into(), value: value.into(), ..Default::default() }
    }

    fn delete(key: &'static str, end: &'static str) -> DeleteRangeRequest {
        DeleteRangeRequest { key: key.into(), range_end: end.into(), ..Default::default() }
    }

    fn revision_of(resp: &Option<ResponseHeader>) -> i64 {
        resp.as_ref().map_or(0, |h| h.revision)
    }

    /// The history records a set of writes holds: (revision, tombstone, key, version).
    fn history(writes: &WriteSet) -> Vec<((i64, i64), bool, String, i64)> {
        writes
            .ops()
            .iter()
            .filter_map(|op| match op {
                WriteOp::Put { family: Family::History, key, value } => {
                    let record = codec::decode_history(key, value).expect("a history record");
                    let key = String::from_utf8_lossy(&record.kv.key).into_owned();
                    Some((
                        (record.revision.main, record.revision.sub),
                        record.tombstone,
                        key,
                        record.kv.version,
                    ))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn puts_count_versions_within_a_generation_and_a_delete_ends_it() {
        let mut f = Fixture::new();
        assert_eq!(f.put(put("a", "1")).map(|r| revision_of(&r.header)), Ok(2));
        assert_eq!(f.put(put("a", "2")).map(|r| revision_of(&r.header)), Ok(3));
        let deleted = f.delete(delete("a", "")).expect("delete");
        assert_eq!((revision_of(&deleted.header), deleted.deleted), (4, 1));
        assert_eq!(f.put(put("a", "3")).map(|r| revision_of(&r.header)), Ok(5));
        assert_eq!(
            f.take_events(),
            [
                (EventType::Put, "a".into(), 2, 2, 1, 0),
                (EventType::Put, "a".into(), 2, 3, 2, 0),
                (EventType::Delete, "a".into(), 0, 4, 0, 0),
                (EventType::Put, "a".into(), 5, 5, 1, 0),
            ],
            "a put after a delete opens a new generation: created again, version 1"
        );
        assert_eq!(
            history(&f.batch.writes),
            [
                ((2, 0), false, "a".into(), 1),
                ((3, 0), false, "a".into(), 2),
                ((4, 0), true, "a".into(), 0),
                ((5, 0), false, "a".into(), 1)
            ]
        );
        let at =
            |rev| f.index.get(b"a", rev).map(|k| (k.create_revision.main, k.mod_revision.main, k.version));
        assert_eq!((at(3), at(4), at(5)), (Some((2, 3, 2)), None, Some((5, 5, 1))));
        assert_eq!(f.current, 5);
    }

    #[test]
    fn changes_of_one_command_share_its_revision_and_read_its_own_writes() {
        let mut f = Fixture::new();
        f.txn(|ctx| {
            assert_eq!(ctx.read_rev(), 1, "before a change, reads see the revision it started at");
            ctx.put(&put("a", "1")).expect("put a");
            ctx.put(&put("b", "1")).expect("put b");
            assert_eq!(ctx.read_rev(), 2);
            let seen = ctx.live(b"a").expect("read").map(|kv| (kv.value, kv.mod_revision));
            assert_eq!(seen, Some(("1".into(), 2)), "a read inside the command sees its own put");
            ctx.delete(&delete("a", "")).expect("delete a");
            assert_eq!(ctx.changes, 3);
        });
        let subs: Vec<_> =
            history(&f.batch.writes).into_iter().map(|(rev, tomb, key, _)| (rev, tomb, key)).collect();
        assert_eq!(
            subs,
            [((2, 0), false, "a".into()), ((2, 1), false, "b".into()), ((2, 2), true, "a".into())]
        );
        assert_eq!(f.current, 2, "one command, one revision");
    }

    #[test]
    fn prev_kv_answers_the_value_before_the_change_from_the_batch_or_the_engine() {
        let mut f = Fixture::new();
        f.put(put("a", "1")).expect("put");
        let again = f.put(PutRequest { prev_kv: true, ..put("a", "2") }).expect("put");
        let prev = again.prev_kv.map(|kv| (kv.value, kv.mod_revision, kv.version));
        assert_eq!(prev, Some(("1".into(), 2, 1)), "read from the batch, not yet on disk");
        assert_eq!(f.put(put("a", "3")).map(|r| r.prev_kv), Ok(None), "no prev_kv unless asked");
        f.commit();
        let first = f.put(PutRequest { prev_kv: true, ..put("b", "1") }).expect("put");
        assert_eq!(first.prev_kv, None, "a new key has no previous value");
        let gone = f.delete(DeleteRangeRequest { prev_kv: true, ..delete("a", "c") }).expect("delete");
        let prev: Vec<_> = gone.prev_kvs.into_iter().map(|kv| (kv.key, kv.value, kv.mod_revision)).collect();
        assert_eq!(
            prev,
            [("a".into(), "3".into(), 4), ("b".into(), "1".into(), 5)],
            "a from the engine, b from the batch"
        );
    }

    #[test]
    fn a_delete_range_tombstones_each_live_key_and_a_miss_changes_nothing() {
        let mut f = Fixture::new();
        for key in ["a", "b", "c"] {
            f.put(put(key, "v")).expect("put");
        }
        f.take_events();
        let deleted = f.delete(delete("a", "c")).expect("delete");
        assert_eq!((revision_of(&deleted.header), deleted.deleted), (5, 2));
        assert_eq!(
            f.take_events(),
            [(EventType::Delete, "a".into(), 0, 5, 0, 0), (EventType::Delete, "b".into(), 0, 5, 0, 0)]
        );
        assert!(f.index.get(b"a", 5).is_none() && f.index.get(b"b", 5).is_none());
        assert!(f.index.get(b"a", 4).is_some(), "history before the delete stays readable");
        assert!(f.index.get(b"c", 5).is_some());

        let missed = f.delete(delete("a", "c")).expect("delete of nothing");
        assert_eq!((revision_of(&missed.header), missed.deleted), (5, 0));
        assert_eq!(f.current, 5, "a delete that finds nothing makes no revision");
        assert!(f.take_events().is_empty());
    }

    #[test]
    fn leases_attach_on_put_and_detach_on_delete_or_an_unleased_put() {
        let mut f = Fixture::new();
        f.leases.grant(7, 10);
        f.put(PutRequest { lease: 7, ..put("a", "1") }).expect("put");
        f.put(PutRequest { lease: 7, ..put("b", "1") }).expect("put");
        assert_eq!(f.lease_keys(7), ["a", "b"]);
        f.put(PutRequest { ignore_value: true, ignore_lease: true, ..put("a", "") }).expect("put");
        let kept = f.take_events().pop().map(|(_, _, _, _, version, lease)| (version, lease));
        assert_eq!(kept, Some((2, 7)), "ignore_lease keeps the lease, ignore_value the value");
        f.put(put("a", "2")).expect("put");
        assert_eq!(f.lease_keys(7), ["b"], "a put without the lease detaches the key");
        f.delete(delete("b", "")).expect("delete");
        assert!(f.lease_keys(7).is_empty(), "a deleted key leaves its lease");

        let revision = f.current;
        assert_eq!(f.put(PutRequest { lease: 9, ..put("c", "1") }), Err(StoreError::LeaseNotFound));
        let missing = PutRequest { ignore_value: true, ..put("d", "") };
        assert_eq!(f.put(missing), Err(StoreError::KeyNotFound));
        assert_eq!(f.current, revision, "a refused put changes nothing");

        f.put(PutRequest { lease: 7, ..put("c", "1") }).expect("put");
        f.take_events();
        let keys: Vec<Box<[u8]>> = vec![b"c".to_vec().into(), b"never".to_vec().into()];
        f.txn(|ctx| ctx.delete_keys(&keys)).expect("a revoke's deletes");
        assert_eq!(f.take_events(), [(EventType::Delete, "c".into(), 0, revision + 2, 0, 0)]);
        assert!(f.lease_keys(7).is_empty());
    }
}
