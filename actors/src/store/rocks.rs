//! RocksDB behind the [`Engine`] trait: one column family per [`Family`], every commit one
//! WriteBatch written with `sync = true` (WAL fsync before the call returns).

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, Options, WriteBatch, WriteOptions,
    DB,
};

use super::engine::{Engine, Family, ScanVisitor, WriteOp, WriteSet};
use super::error::StoreError;

const HISTORY_CF: &str = "history";
const META_CF: &str = "meta";
const LEASE_CF: &str = "lease";

/// Block cache size: reads of recent values mostly hit the memtable or this cache; a bound keeps
/// RocksDB's share of RSS predictable.
const BLOCK_CACHE_BYTES: usize = 32 << 20;

/// A RocksDB database holding the store's column families.
pub struct RocksEngine {
    db: DB,
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
        let families = [HISTORY_CF, META_CF, LEASE_CF].map(|name| {
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            let mut cf_opts = Options::default();
            cf_opts.set_compression_type(DBCompressionType::Lz4);
            cf_opts.set_block_based_table_factory(&table);
            ColumnFamilyDescriptor::new(name, cf_opts)
        });
        let db = DB::open_cf_descriptors(&db_opts, dir, families)?;
        Ok(Self { db })
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
}

impl Engine for RocksEngine {
    fn commit(&self, set: &WriteSet) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        for op in set.ops() {
            match op {
                WriteOp::Put { family, key, value } => batch.put_cf(self.cf(*family)?, key, value),
                WriteOp::Delete { family, key } => batch.delete_cf(self.cf(*family)?, key),
            }
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.write_opt(batch, &opts)?;
        Ok(())
    }

    fn get_many(&self, family: Family, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let cf = self.cf(family)?;
        self.db
            .multi_get_cf(keys.iter().map(|k| (cf, k.as_slice())))
            .into_iter()
            .map(|r| r.map_err(StoreError::from))
            .collect()
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

    fn size_bytes(&self) -> u64 {
        [Family::History, Family::Meta, Family::Lease]
            .into_iter()
            .map(|f| {
                self.property(f, "rocksdb.total-sst-files-size")
                    + self.property(f, "rocksdb.cur-size-all-mem-tables")
            })
            .sum()
    }
}
