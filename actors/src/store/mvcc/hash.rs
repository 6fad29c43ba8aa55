//! Hashes of the stored MVCC state, for Maintenance.HashKV and Maintenance.Hash: two members
//! with the same history (the same writes and compactions, in the same order) get the same hash,
//! so a checker can compare them.
//!
//! What HashKV covers at revision `rev` with the last compaction at `c`: every history record
//! with revision `<= rev` that the compaction at `c` keeps, in revision order: all records after
//! `c`, and the puts at or before `c` that survived it (the latest version of each key that was
//! live at `c`). Tombstones at or before `c` are left out: one kept at exactly `c` is dropped by a
//! restart, so including it would make a restarted member disagree. Each record feeds its 8-byte
//! revision key and its stored value into CRC-32C (Castagnoli, as etcd hashes), read from one
//! RocksDB snapshot, so the compaction revision and the records always belong together.

use super::codec::{self, COMPACTED_KEY};
use super::engine::Family;
use super::error::StoreError;
use super::revision::Revision;
use super::rocks::{RocksEngine, RocksSnapshot};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    let mut crc = Crc32c::default();
    crc.update(b"history");
    snapshot.scan(Family::History, &[], &mut |key, value| {
        let main =
            Revision::from_key_bytes(key).map_err(|e| StoreError::Corrupt(format!("history key: {e}")))?.main;
        if main > hash_revision {
            return Ok(false);
        }
        // Only the few records a compaction kept need decoding, to tell tombstones apart.
        if main > compact_revision || !codec::decode_history_value(value)?.0 {
            crc.update(key);
            crc.update(value);
        }
        Ok(true)
    })?;
    Ok(KvHash { hash: crc.finish(), compact_revision, hash_revision })
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
    use crate::store::mvcc::batch::Batch;
    use crate::store::mvcc::command::Command;
    use crate::store::mvcc::writer::{StoreConfig, StoreCore};
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
        core.commit(batch).expect("commit");
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
