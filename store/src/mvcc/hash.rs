//! Hashes of the stored MVCC state, for Maintenance.HashKV and Maintenance.Hash: two members
//! with the same history (the same writes and compactions, in the same order) get the same hash,
//! so a checker can compare them.
//!
//! HashKV is etcd's own (mvcc's HashByRev): CRC-32C (Castagnoli) fed the bucket name `key`,
//! then each kept record as etcd's backend holds it, in revision order: its 17-byte revision
//! key (8-byte big-endian main, `_`, 8-byte big-endian sub; an 18th byte `t` marks a
//! tombstone) and its marshalled `mvccpb.KeyValue` (a tombstone's holds only the key). So
//! actcd and etcd given the same history answer the same hash, and a migrated etcd data dir
//! can be checked against the file it came from ([`etcd_record`]).
//!
//! The records hashed at revision `rev` with the last compaction at `c` are etcd's: every
//! record in `(c, rev]`, and of those at or before `c` the ones still their key's live version
//! at `rev` ([`etcd_hash`] has the whole rule), all read from one RocksDB snapshot, so the
//! compaction revision and the records always belong together.

use std::collections::{HashMap, HashSet};

use actcd_proto::mvccpb::KeyValue;
use prost::Message;

use crate::backend::codec::{self, COMPACTED_KEY};
use crate::backend::engine::Family;
use crate::backend::rocks::{RocksEngine, RocksSnapshot};
use crate::error::StoreError;
use crate::mvcc::revision::Revision;

/// CRC-32C with the reflected Castagnoli polynomial, table-driven.
#[derive(Debug, Clone, Copy)]
pub struct Crc32c {
    state: u32,
}

const CASTAGNOLI: u32 = 0x82f6_3b78;

const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ CASTAGNOLI } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

impl Default for Crc32c {
    fn default() -> Self {
        Self { state: !0 }
    }
}

impl Crc32c {
    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut crc = self.state;
        for b in bytes {
            crc = TABLE[((crc ^ u32::from(*b)) & 0xff) as usize] ^ (crc >> 8);
        }
        self.state = crc;
    }

    /// The checksum of everything fed so far.
    pub fn finish(&self) -> u32 {
        !self.state
    }
}

/// The answer to HashKV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvHash {
    /// The hash.
    pub hash: u32,
    /// The compaction revision the hash was taken under.
    pub compact_revision: i64,
    /// The revision hashed up to (the current one when 0 was asked for).
    pub hash_revision: i64,
}

/// HashKV at `revision` (0: `current`). `current` and `compacted` are the store's visible and
/// compaction revisions, read just before: they decide etcd's errors (at or before the
/// compaction: compacted; after `current`: future).
pub fn hash_kv(
    engine: &RocksEngine,
    revision: i64,
    current: i64,
    compacted: i64,
) -> Result<KvHash, StoreError> {
    if revision > 0 && revision <= compacted {
        return Err(StoreError::Compacted);
    }
    if revision > current {
        return Err(StoreError::FutureRevision);
    }
    let hash_revision = if revision <= 0 { current } else { revision };
    let snapshot = engine.snapshot();
    let compact_revision = stored_compaction(&snapshot)?;
    // A compaction that committed after the caller looked may have removed part of the range.
    if revision > 0 && revision <= compact_revision {
        return Err(StoreError::Compacted);
    }
    let mut scan = |visit: &mut RecordVisitor<'_>| -> Result<(), StoreError> {
        snapshot.scan(Family::History, &[], &mut |key, value| {
            let revision = Revision::from_key_bytes(key)
                .map_err(|e| StoreError::Corrupt(format!("history key: {e}")))?;
            let (tombstone, kv) = codec::decode_history_value(value)?;
            let (etcd_key, etcd_value) = etcd_record(revision, tombstone, &kv);
            Ok(visit(HashRecord {
                main: revision.main,
                sub: revision.sub,
                tombstone,
                key: &kv.key,
                etcd_key: &etcd_key,
                etcd_value: &etcd_value,
            }))
        })
    };
    let hash = etcd_hash(hash_revision, compact_revision, &mut scan)?;
    Ok(KvHash { hash, compact_revision, hash_revision })
}

/// One history record as etcd's HashKV sees it.
pub struct HashRecord<'a> {
    /// Its main revision.
    pub main: i64,
    /// Its sub revision.
    pub sub: i64,
    /// True for a delete.
    pub tombstone: bool,
    /// The user's key it belongs to.
    pub key: &'a [u8],
    /// Its key in etcd's `key` bucket.
    pub etcd_key: &'a [u8],
    /// Its value there.
    pub etcd_value: &'a [u8],
}

/// Takes the records of a scan in revision order; returns false to stop it.
pub type RecordVisitor<'a> = dyn FnMut(HashRecord<'_>) -> bool + 'a;

/// etcd's HashKV (mvcc's HashByRev) at `revision` over the records `scan` visits in revision
/// order, with the compaction at `compacted`. The records after the compaction all count; one
/// at or before it counts only while it is still its key's live version at `revision` (etcd's
/// `Keep(revision)`), or, when no key at all is live then, every one does (etcd skips only
/// "if there is a keep set"). `scan` runs twice: once to find those records, then to hash;
/// in between it holds one entry per key live at the compaction.
pub fn etcd_hash<E>(
    revision: i64,
    compacted: i64,
    scan: &mut dyn FnMut(&mut RecordVisitor<'_>) -> Result<(), E>,
) -> Result<u32, E> {
    let mut before: HashMap<Vec<u8>, (i64, i64)> = HashMap::new();
    let mut live_after: HashMap<Vec<u8>, bool> = HashMap::new();
    scan(&mut |r| {
        if r.main > revision {
            return false;
        }
        if r.main <= compacted {
            if r.tombstone {
                before.remove(r.key);
            } else {
                before.insert(r.key.to_vec(), (r.main, r.sub));
            }
        } else {
            before.remove(r.key);
            live_after.insert(r.key.to_vec(), !r.tombstone);
        }
        true
    })?;
    let kept: HashSet<(i64, i64)> = before.into_values().collect();
    let keep_all = kept.is_empty() && !live_after.into_values().any(|live| live);
    let mut crc = Crc32c::default();
    crc.update(b"key");
    scan(&mut |r| {
        if r.main > revision {
            return false;
        }
        if r.main > compacted || keep_all || (!r.tombstone && kept.contains(&(r.main, r.sub))) {
            crc.update(r.etcd_key);
            crc.update(r.etcd_value);
        }
        true
    })?;
    Ok(crc.finish())
}

/// One history record as etcd's backend stores it in its `key` bucket: (key, value).
pub fn etcd_record(revision: Revision, tombstone: bool, kv: &KeyValue) -> (Vec<u8>, Vec<u8>) {
    let value = if tombstone {
        KeyValue { key: kv.key.clone(), ..KeyValue::default() }.encode_to_vec()
    } else {
        kv.encode_to_vec()
    };
    (etcd_key(revision, tombstone), value)
}

/// etcd's backend key of a revision: 8-byte big-endian main, `_`, 8-byte big-endian sub, and
/// `t` after a tombstone's.
pub fn etcd_key(revision: Revision, tombstone: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.extend_from_slice(&revision.main.to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&revision.sub.to_be_bytes());
    if tombstone {
        key.push(b't');
    }
    key
}

/// Maintenance.Hash: every history and lease record and the compaction revision, from one
/// snapshot.
pub fn hash_all(engine: &RocksEngine) -> Result<u32, StoreError> {
    let snapshot = engine.snapshot();
    let mut crc = Crc32c::default();
    crc.update(&stored_compaction(&snapshot)?.to_be_bytes());
    for (name, family) in [(&b"history"[..], Family::History), (&b"lease"[..], Family::Lease)] {
        crc.update(name);
        snapshot.scan(family, &[], &mut |key, value| {
            crc.update(key);
            crc.update(value);
            Ok(true)
        })?;
    }
    Ok(crc.finish())
}

fn stored_compaction(snapshot: &RocksSnapshot<'_>) -> Result<i64, StoreError> {
    match snapshot.get(Family::Meta, COMPACTED_KEY)? {
        Some(v) => codec::decode_i64(&v),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::command::Command;
    use crate::apply::writer::{StoreConfig, StoreCore};
    use crate::mvcc::batch::Batch;
    use actcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest};

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        let mut crc = Crc32c::default();
        crc.update(b"123456789");
        assert_eq!(crc.finish(), 0xe306_9283);
    }

    fn apply(core: &mut StoreCore<RocksEngine>, commands: &[Command]) {
        let mut batch = Batch::default();
        for c in commands {
            core.apply(c, &mut batch).expect("apply");
        }
        core.commit_by_log(batch, core.applied_index() + 1).expect("commit");
    }

    fn put(key: &str, value: &str) -> Command {
        Command::Put(PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: value.as_bytes().to_vec().into(),
            ..Default::default()
        })
    }

    fn history() -> Vec<Command> {
        vec![
            put("a", "1"),
            put("b", "1"),
            put("a", "2"),
            Command::DeleteRange(DeleteRangeRequest { key: "b".into(), ..Default::default() }),
            put("c", "1"),
        ]
    }

    #[test]
    fn same_history_same_hash_across_stores_compactions_and_restarts() {
        let (d1, d2) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
        let open = |d: &tempfile::TempDir| {
            let engine = RocksEngine::open(d.path()).expect("engine");
            (engine.clone(), StoreCore::open(engine, StoreConfig::default()).expect("store"))
        };
        let (e1, mut s1) = open(&d1);
        let (e2, mut s2) = open(&d2);
        apply(&mut s1, &history());
        for c in history() {
            apply(&mut s2, &[c]);
        }
        let current = s1.read_view().revision();
        assert_eq!(current, 6);
        let h =
            |e: &RocksEngine, rev: i64, compacted: i64| hash_kv(e, rev, current, compacted).expect("hash");
        for rev in [0, 2, 3, 5, 6] {
            assert_eq!(h(&e1, rev, 0), h(&e2, rev, 0), "rev {rev}");
        }
        assert_ne!(h(&e1, 4, 0).hash, h(&e1, 5, 0).hash);
        assert_eq!(h(&e1, 0, 0).hash_revision, 6);
        assert_eq!(hash_all(&e1).expect("hash"), hash_all(&e2).expect("hash"));
        assert_eq!(hash_kv(&e1, 7, current, 0), Err(StoreError::FutureRevision));

        // Compacting at the delete keeps its tombstone until a restart drops it: the hash
        // must not change across that restart.
        let compact = Command::Compact(CompactionRequest { revision: 5, physical: false });
        apply(&mut s1, std::slice::from_ref(&compact));
        apply(&mut s2, &[compact]);
        assert_eq!(hash_kv(&e1, 5, current, 5), Err(StoreError::Compacted));
        let before = h(&e1, 0, 5);
        assert_eq!(before, h(&e2, 0, 5));
        assert_eq!(before.compact_revision, 5);
        drop((s1, e1));
        let (e1, _s1) = open(&d1);
        assert_eq!(h(&e1, 0, 5), before);
        assert_eq!(h(&e1, 6, 5), before);
    }
}
