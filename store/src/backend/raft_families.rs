//! The Raft log's own records in the data dir's RocksDB: its vote, committed id and purge
//! point (`raft_meta`), and the entries data dirs before 2026-12-06 kept in RocksDB
//! (`raft_log`), which the log moves out into its segment files once. The backend owns the
//! database; this handle is the only way past the [`Engine`](super::engine::Engine) seam, so
//! the column families are declared in one place and nothing else reaches the database.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{IteratorMode, WriteBatch, WriteOptions, DB};

use crate::error::StoreError;

/// Where data dirs before 2026-12-06 kept the Raft log's entries: moved into the write-ahead
/// log when such a dir first opens (the Raft crate's log_store), then empty. Still listed, as
/// RocksDB opens a database only with every family it has.
pub(crate) const RAFT_LOG_CF: &str = "raft_log";
/// The Raft log's vote, committed id and purge point.
pub(crate) const RAFT_META_CF: &str = "raft_meta";

/// The Raft log's column families of one open database. Clones share it.
#[derive(Clone)]
pub struct RaftFamilies {
    db: Arc<DB>,
}

impl RaftFamilies {
    pub(crate) fn new(db: Arc<DB>) -> Self {
        Self { db }
    }

    /// The data dir the database lives in (the log's segments go beside it).
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// Record `key` of the log's meta family.
    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(cf(&self.db, RAFT_META_CF)?, key)?)
    }

    /// Writes record `key` of the log's meta family, synced to disk when `sync`.
    pub fn put_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(&self.db, RAFT_META_CF)?, key, value);
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        Ok(self.db.write_opt(batch, &opts)?)
    }

    /// Visits the entries an old data dir kept in RocksDB, in log order.
    pub fn legacy_entries(
        &self,
        visit: &mut dyn FnMut(&[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        for item in self.db.iterator_cf(cf(&self.db, RAFT_LOG_CF)?, IteratorMode::Start) {
            let (_, value) = item?;
            visit(&value)?;
        }
        Ok(())
    }

    /// Whether an old data dir's entries are still in RocksDB.
    pub fn has_legacy_entries(&self) -> Result<bool, StoreError> {
        Ok(self.db.iterator_cf(cf(&self.db, RAFT_LOG_CF)?, IteratorMode::Start).next().is_some())
    }

    /// Deletes the entries an old data dir kept in RocksDB, once they are moved.
    pub fn clear_legacy_entries(&self) -> Result<(), StoreError> {
        let family = cf(&self.db, RAFT_LOG_CF)?;
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(family, [0u8; 8], [0xffu8; 8]);
        batch.delete_cf(family, [0xffu8; 8]);
        Ok(self.db.write(batch)?)
    }

    /// Writes an entry the way data dirs before the segment files kept it (tests of the move).
    pub fn put_legacy_entry(&self, index: u64, value: &[u8]) -> Result<(), StoreError> {
        Ok(self.db.put_cf(cf(&self.db, RAFT_LOG_CF)?, index.to_be_bytes(), value)?)
    }
}

fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a rocksdb::ColumnFamily, StoreError> {
    db.cf_handle(name).ok_or_else(|| StoreError::Corrupt(format!("column family {name} is missing")))
}
