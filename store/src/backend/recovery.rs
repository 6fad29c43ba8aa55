//! Opening a data dir: the format check, the meta records, the leases, and the revision index
//! rebuilt from the history records, all checked against what this store writes, so that a
//! damaged data dir is refused at open rather than overflowing later. It also finishes what a
//! crash interrupted: the deletes of a compaction whose record was already durable.

use crate::backend::codec::{
    self, AppliedPosition, APPLIED_KEY, COMPACTED_KEY, FORMAT_KEY, FORMAT_VERSION, LEGACY_APPLIED_INDEX_KEY,
};
use crate::backend::engine::{Engine, Family, WriteSet};
use crate::error::StoreError;
use crate::lease_store::index::{LeaseIndex, MAX_LEASE_TTL};
use crate::mvcc::index::Index;
use crate::mvcc::revision::Revision;

/// What a data dir holds, read back at open.
pub(crate) struct Recovered {
    /// The revision index, densely packed.
    pub(crate) index: Index,
    /// Leases and the keys attached to each.
    pub(crate) leases: LeaseIndex,
    /// The store revision: of the newest history record or the compaction, at least 1.
    pub(crate) current: i64,
    /// The compaction revision (0 if never compacted).
    pub(crate) compacted: i64,
    /// The last log entry applied and durable (none before the first).
    pub(crate) applied: Option<AppliedPosition>,
    /// The data dir still holds [`LEGACY_APPLIED_INDEX_KEY`], for the next commit to delete.
    pub(crate) legacy_applied: bool,
}

/// The applied position `engine` records: the one record of it, read at open and by the Raft
/// state machine when it starts or takes a snapshot.
pub fn applied_position(engine: &impl Engine) -> Result<Option<AppliedPosition>, StoreError> {
    engine.get(Family::Meta, APPLIED_KEY)?.map(|v| codec::decode_applied(&v)).transpose()
}

/// Reads back what `engine` holds, checking the data format (and writing it on an empty
/// store) and rebuilding the index from the history records.
pub(crate) fn recover(engine: &impl Engine) -> Result<Recovered, StoreError> {
    // Numbers read back are checked against what this store writes: a damaged record must
    // refuse the data dir here, not overflow later (a TTL past MAX_LEASE_TTL overflowed
    // the lessor's deadline at start; a negative applied index, its counter, when it was an
    // i64 record).
    let compacted = match engine.get(Family::Meta, COMPACTED_KEY)? {
        Some(v) => match codec::decode_i64(&v)? {
            c @ 0..=Revision::MAX_MAIN => c,
            other => return Err(StoreError::Corrupt(format!("compaction revision {other}"))),
        },
        None => 0,
    };
    let applied = applied_position(engine)?;
    let legacy_applied = engine.get(Family::Meta, LEGACY_APPLIED_INDEX_KEY)?.is_some();
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
            // A key's version counts its puts since its creation, each at a revision of its
            // own, so it is at most the revisions between the two; a larger one overflowed the
            // next put's version (found by fuzz/open_store).
            let (created, version, at) = (record.kv.create_revision, record.kv.version, record.revision.main);
            if !(1..=at).contains(&created) || !(1..=at - created + 1).contains(&version) {
                return Err(StoreError::Corrupt(format!(
                    "history record at revision {at}: version {version} of a key created at {created}"
                )));
            }
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
    // `StoreCore::commit`): those deletes are redone here.
    for rev in index.compact(compacted) {
        stale.delete(Family::History, rev.to_key_bytes().to_vec());
    }
    if !stale.is_empty() {
        engine.commit(&stale)?;
    }
    // An empty store is at revision 1, so the first write gets revision 2.
    let current = last.max(compacted).max(1);
    Ok(Recovered { index, leases, current, compacted, applied, legacy_applied })
}

#[cfg(test)]
mod tests {
    //! Regression tests for what the fuzz target fuzz/open_store found, on the in-memory engine.
    use super::*;
    use crate::apply::writer::{StoreConfig, StoreCore};
    use crate::backend::memory::MemoryEngine;
    use actcd_proto::mvccpb::KeyValue;

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
    /// write (the record is three unsigned varints now; a torn one is refused), and a lease
    /// TTL past the largest overflowed the lessor's deadline at start.
    #[test]
    fn out_of_range_numbers_on_disk_refuse_the_data_dir() {
        let lease = 7i64.to_be_bytes();
        for records in [
            vec![(Family::Meta, APPLIED_KEY, vec![0x80])],
            vec![(Family::Meta, COMPACTED_KEY, codec::encode_i64(-3))],
            vec![(Family::Meta, COMPACTED_KEY, codec::encode_i64(Revision::MAX_MAIN + 1))],
            vec![(Family::Lease, &lease[..], codec::encode_i64(i64::MAX))],
            vec![(Family::Lease, &lease[..], codec::encode_i64(-1))],
            vec![(Family::Lease, &0i64.to_be_bytes()[..], codec::encode_i64(10))],
        ] {
            assert!(matches!(open_on(&records), Err(StoreError::Corrupt(_))), "{records:?}");
        }
        // A version no put sequence can reach: the next put's version overflowed.
        let history = |version: i64, created: i64| {
            let kv = KeyValue {
                key: "k".into(),
                create_revision: created,
                mod_revision: 3,
                version,
                ..Default::default()
            };
            (
                Family::History,
                Revision { main: 3, sub: 0 }.to_key_bytes().to_vec(),
                codec::encode_history_value(false, &kv),
            )
        };
        for (version, created) in [(i64::MAX, 1), (4, 1), (0, 1), (1, 4), (1, 0)] {
            let (family, key, value) = history(version, created);
            let opened = open_on(&[(family, &key[..], value)]);
            assert!(matches!(opened, Err(StoreError::Corrupt(_))), "version {version} created at {created}");
        }
        let (family, key, value) = history(3, 1);
        assert!(open_on(&[(family, &key[..], value)]).is_ok(), "three puts at revisions 1 to 3");

        let fine = open_on(&[
            (
                Family::Meta,
                APPLIED_KEY,
                codec::encode_applied(&AppliedPosition { term: 2, leader: 9, index: 5 }),
            ),
            (Family::Lease, &lease[..], codec::encode_i64(MAX_LEASE_TTL)),
        ])
        .expect("in-range records open");
        assert_eq!(fine.read_view().applied_index(), 5);
        assert_eq!(fine.lease_list(), vec![(7, MAX_LEASE_TTL)]);
    }

    /// A data dir from before the Raft log holds a count of commands as its applied index,
    /// which names no log entry: it opens with no applied position, and its first commit
    /// deletes the old record, so one record of the position is left.
    #[test]
    fn the_old_applied_index_record_is_not_a_position_and_goes_at_the_first_commit() {
        let mut core =
            open_on(&[(Family::Meta, LEGACY_APPLIED_INDEX_KEY, codec::encode_i64(40))]).expect("opens");
        assert_eq!(core.applied_position(), None);
        assert_eq!(core.read_view().applied_index(), 0);
        let position = AppliedPosition { term: 1, leader: 3, index: 1 };
        core.commit_by_log(crate::Batch::default(), position).expect("commits");
        let engine = core.engine();
        assert_eq!(engine.get(Family::Meta, LEGACY_APPLIED_INDEX_KEY).expect("reads"), None);
        assert_eq!(applied_position(engine).expect("reads"), Some(position));
        assert_eq!(core.read_view().applied_index(), 1);
    }
}
