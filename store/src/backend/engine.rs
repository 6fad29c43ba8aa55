//! The narrow storage seam. The store core speaks only this trait; RocksDB lives behind it in
//! [`crate::backend::rocks`], so a different engine (or a replicated log in front of one) plugs in here.

use crate::error::StoreError;

/// The three keyspaces the store writes. Each maps to one RocksDB column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Every version of every key, keyed by its 8-byte revision: etcd's `key` bucket.
    History,
    /// Store-wide records: format version, compacted revision, applied index.
    Meta,
    /// Leases by id (filled by the lease actor).
    Lease,
}

/// One change inside a [`WriteSet`].
#[derive(Debug, Clone)]
pub enum WriteOp {
    /// Set `key` to `value`.
    Put {
        /// The keyspace.
        family: Family,
        /// The record key.
        key: Vec<u8>,
        /// The record value.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Delete {
        /// The keyspace.
        family: Family,
        /// The record key.
        key: Vec<u8>,
    },
}

/// Changes that become durable together or not at all (one RocksDB WriteBatch).
#[derive(Debug, Default, Clone)]
pub struct WriteSet {
    ops: Vec<WriteOp>,
    bytes: usize,
}

impl WriteSet {
    /// Adds a put.
    pub fn put(&mut self, family: Family, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += key.len() + value.len();
        self.ops.push(WriteOp::Put { family, key, value });
    }

    /// Adds a delete.
    pub fn delete(&mut self, family: Family, key: Vec<u8>) {
        self.bytes += key.len();
        self.ops.push(WriteOp::Delete { family, key });
    }

    /// The changes in the order they were added.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Key and value bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.bytes + self.ops.capacity() * std::mem::size_of::<WriteOp>()
    }
}

/// Called for each record of a scan with its key and value; returns whether to go on.
pub type ScanVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, StoreError> + 'a;

/// Called for each record of [`Engine::visit_many`] with its position and value (`None`: absent).
pub type ValueVisitor<'a> = dyn FnMut(usize, Option<&[u8]>) -> Result<(), StoreError> + 'a;

/// What the store needs from a storage engine.
pub trait Engine: Send + Sync + Unpin + 'static {
    /// Applies `set` atomically and returns only once it is on stable storage (fsync).
    fn commit(&self, set: &WriteSet) -> Result<(), StoreError>;

    /// Applies `set` atomically without an fsync of its own: for the writes of Raft log
    /// entries that are already durable in the log, which a restart replays if these writes
    /// are lost (`actcd_raft::applied_sync` syncs them behind, every 100 ms).
    fn commit_by_log(&self, set: &WriteSet) -> Result<(), StoreError> {
        self.commit(set)
    }

    /// Reads several records of one family; `None` where a key is absent.
    fn get_many(&self, family: Family, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError>;

    /// Reads several records of one family and hands each to `visit` with its position in
    /// `keys`, in that order, without copying it out of the engine. `bulk` marks a read too
    /// large for the cache: RocksDB then reads its blocks without keeping them, so a full
    /// list does not push out what the small reads use.
    fn visit_many(
        &self,
        family: Family,
        keys: &[[u8; 8]],
        bulk: bool,
        visit: &mut ValueVisitor<'_>,
    ) -> Result<(), StoreError> {
        let _ = bulk;
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        for (i, value) in self.get_many(family, &keys)?.into_iter().enumerate() {
            visit(i, value.as_deref())?;
        }
        Ok(())
    }

    /// Reads one record.
    fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Visits the records of `family` with key >= `from` in key order until `visit` returns false.
    fn scan(&self, family: Family, from: &[u8], visit: &mut ScanVisitor<'_>) -> Result<(), StoreError>;

    /// Bytes the engine occupies on disk and in its write buffers (etcd's dbSize).
    fn size_bytes(&self) -> u64;

    /// The engine's own memory and backlog figures, as (metric name, value) pairs.
    fn memory_stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
