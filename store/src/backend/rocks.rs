//! RocksDB behind the [`Engine`] trait: one column family per [`Family`], every commit one
//! WriteBatch written with `sync = true` (WAL fsync before the call returns).

use std::path::Path;
use std::sync::Arc;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamilyDescriptor, CompactOptions,
    DBCompressionType, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions, DB,
};

use super::raft_families::{RaftFamilies, RAFT_LOG_CF, RAFT_META_CF};
use crate::backend::engine::{Engine, Family, ScanVisitor, ValueVisitor, WriteOp, WriteSet};
use crate::error::StoreError;

const HISTORY_CF: &str = "history";
pub(crate) const META_CF: &str = "meta";
const LEASE_CF: &str = "lease";

/// Block cache size: reads of recent values mostly hit the memtable or this cache; a bound keeps
/// RocksDB's share of RSS predictable.
const BLOCK_CACHE_BYTES: usize = 32 << 20;

/// A RocksDB database holding the store's column families. Clones share the one database (the
/// maintenance services hold one beside the writer's).
#[derive(Clone)]
pub struct RocksEngine {
    db: Arc<DB>,
}

impl RocksEngine {
    /// Opens (or creates) the database in `dir`.
    ///
    /// A non-empty directory without a RocksDB `CURRENT` file is refused rather than written
    /// into: it is most likely another program's data dir (etcd's, say).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir)
                .map_err(|e| StoreError::Storage(format!("cannot read {}: {e}", dir.display())))?;
            if entries.next().is_some() && !dir.join("CURRENT").exists() {
                return Err(StoreError::Corrupt(format!(
                    "{} is not empty and holds no actcd database",
                    dir.display()
                )));
            }
        }
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.increase_parallelism(2);
        // Bounds the WAL so that restart replay stays short.
        db_opts.set_max_total_wal_size(64 << 20);

        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let families = [HISTORY_CF, META_CF, LEASE_CF, RAFT_LOG_CF, RAFT_META_CF].map(|name| {
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            let mut cf_opts = Options::default();
            cf_opts.set_compression_type(DBCompressionType::Lz4);
            cf_opts.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(name, cf_opts)
        });
        let db = DB::open_cf_descriptors(&db_opts, dir, families)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// Opens the checkpoint in `dir` for reading only (a snapshot being installed), leaving
    /// its files as they are.
    pub fn open_read_only(dir: &Path) -> Result<Self, StoreError> {
        let names = [HISTORY_CF, META_CF, LEASE_CF, RAFT_LOG_CF, RAFT_META_CF];
        let db = DB::open_cf_for_read_only(&Options::default(), dir, names, false)?;
        Ok(Self { db: Arc::new(db) })
    }

    /// The Raft log's column families in this database.
    pub fn raft_families(&self) -> RaftFamilies {
        RaftFamilies::new(Arc::clone(&self.db))
    }

    /// Syncs RocksDB's own write-ahead log: the writes made without an fsync (the state
    /// machine's, which the Raft log replays) become durable.
    pub fn sync_wal(&self) -> Result<(), StoreError> {
        Ok(self.db.flush_wal(true)?)
    }

    /// RocksDB's sequence number of the latest write, to tell whether anything was written
    /// since the last [`Self::sync_wal`].
    pub fn written_sequence(&self) -> u64 {
        self.db.latest_sequence_number()
    }

    fn cf(&self, family: Family) -> Result<&rocksdb::ColumnFamily, StoreError> {
        let name = match family {
            Family::History => HISTORY_CF,
            Family::Meta => META_CF,
            Family::Lease => LEASE_CF,
        };
        self.db.cf_handle(name).ok_or_else(|| StoreError::Corrupt(format!("column family {name} is missing")))
    }

    fn property(&self, family: Family, name: &str) -> u64 {
        self.cf(family)
            .ok()
            .and_then(|cf| self.db.property_int_value_cf(cf, name).ok().flatten())
            .unwrap_or(0)
    }

    /// Integer property `name` summed over the families.
    fn total(&self, name: &str) -> u64 {
        FAMILIES.into_iter().map(|f| self.property(f, name)).sum()
    }

    /// Writes a consistent copy of the database into `dir` (which must not exist yet): SST
    /// files hard-linked where the file system allows, the rest copied, memtables flushed first.
    pub fn checkpoint(&self, dir: &Path) -> Result<(), StoreError> {
        Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }

    /// Rewrites every column family's files down to the live records (etcd's defragment):
    /// memtables are flushed and all levels compacted, so deleted and compacted-away
    /// records stop taking space.
    pub fn compact_all(&self) -> Result<(), StoreError> {
        let mut opts = CompactOptions::default();
        opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        opts.set_exclusive_manual_compaction(true);
        for family in FAMILIES {
            let cf = self.cf(family)?;
            self.db.flush_cf(cf)?;
            self.db.compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
        }
        Ok(())
    }

    /// RocksDB's estimate of the bytes its live records take (etcd's dbSizeInUse): files
    /// minus the space that compaction would reclaim, plus the memtables.
    pub fn live_bytes(&self) -> u64 {
        self.total("rocksdb.estimate-live-data-size") + self.total("rocksdb.cur-size-all-mem-tables")
    }

    fn write(&self, set: &WriteSet, sync: bool) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        for op in set.ops() {
            match op {
                WriteOp::Put { family, key, value } => batch.put_cf(self.cf(*family)?, key, value),
                WriteOp::Delete { family, key } => batch.delete_cf(self.cf(*family)?, key),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db.write_opt(batch, &opts)?;
        Ok(())
    }

    /// A consistent point-in-time view for reads that must agree with each other.
    pub fn snapshot(&self) -> RocksSnapshot<'_> {
        RocksSnapshot { engine: self, snapshot: self.db.snapshot() }
    }
}

const FAMILIES: [Family; 3] = [Family::History, Family::Meta, Family::Lease];

/// Reads from one point in time: writes committed after [`RocksEngine::snapshot`] are not seen.
pub struct RocksSnapshot<'a> {
    engine: &'a RocksEngine,
    snapshot: Snapshot<'a>,
}

impl RocksSnapshot<'_> {
    /// Reads one record.
    pub fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.snapshot.get_cf(self.engine.cf(family)?, key)?)
    }

    /// Visits the records of `family` with key >= `from` in key order until `visit` returns false.
    pub fn scan(&self, family: Family, from: &[u8], visit: &mut ScanVisitor<'_>) -> Result<(), StoreError> {
        let mode = rocksdb::IteratorMode::From(from, rocksdb::Direction::Forward);
        for item in self.snapshot.iterator_cf(self.engine.cf(family)?, mode) {
            let (key, value) = item?;
            if !visit(&key, &value)? {
                break;
            }
        }
        Ok(())
    }
}

impl Engine for RocksEngine {
    fn commit(&self, set: &WriteSet) -> Result<(), StoreError> {
        self.write(set, true)
    }

    fn commit_by_log(&self, set: &WriteSet) -> Result<(), StoreError> {
        self.write(set, false)
    }

    fn get_many(&self, family: Family, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let cf = self.cf(family)?;
        self.db
            .multi_get_cf(keys.iter().map(|k| (cf, k.as_slice())))
            .into_iter()
            .map(|r| r.map_err(StoreError::from))
            .collect()
    }

    fn visit_many(
        &self,
        family: Family,
        keys: &[[u8; 8]],
        bulk: bool,
        visit: &mut ValueVisitor<'_>,
    ) -> Result<(), StoreError> {
        let mut opts = ReadOptions::default();
        opts.fill_cache(!bulk);
        // Unsorted: MultiGet sorts a copy itself and answers in the order asked.
        let values = self.db.batched_multi_get_cf_opt(self.cf(family)?, keys, false, &opts);
        for (i, value) in values.into_iter().enumerate() {
            visit(i, value?.as_deref())?;
        }
        Ok(())
    }

    fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(self.cf(family)?, key)?)
    }

    fn scan(&self, family: Family, from: &[u8], visit: &mut ScanVisitor<'_>) -> Result<(), StoreError> {
        let iter = self
            .db
            .iterator_cf(self.cf(family)?, rocksdb::IteratorMode::From(from, rocksdb::Direction::Forward));
        for item in iter {
            let (key, value) = item?;
            if !visit(&key, &value)? {
                break;
            }
        }
        Ok(())
    }

    fn memory_stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            (
                crate::metric_names::ACTCD_ROCKSDB_MEMTABLE_BYTES,
                self.total("rocksdb.cur-size-all-mem-tables"),
            ),
            // The block cache is shared by the families: read it once.
            (
                crate::metric_names::ACTCD_ROCKSDB_BLOCK_CACHE_BYTES,
                self.property(Family::History, "rocksdb.block-cache-usage"),
            ),
            (crate::metric_names::ACTCD_ROCKSDB_ESTIMATED_KEYS, self.total("rocksdb.estimate-num-keys")),
            (
                crate::metric_names::ACTCD_ROCKSDB_PENDING_COMPACTION_BYTES,
                self.total("rocksdb.estimate-pending-compaction-bytes"),
            ),
        ]
    }

    fn size_bytes(&self) -> u64 {
        self.total("rocksdb.total-sst-files-size") + self.total("rocksdb.cur-size-all-mem-tables")
    }
}
