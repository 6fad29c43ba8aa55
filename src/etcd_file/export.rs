//! An actcd store written out as etcd's backend, a bbolt file: what Maintenance.Snapshot
//! streams, so that `etcdctl snapshot status` reads it, `etcdctl snapshot restore` and etcd
//! itself start from it, and `actcd snapshot restore` takes it back (through [`super::backend`],
//! which reads these same buckets).
//!
//! The buckets and their records are the store's ([`etcd_records`]); this file writes them
//! into bbolt's pages.
//!
//! Everything is read from one RocksDB snapshot, twice (see [`actcd_edge::bbolt::writer`]):
//! the file is consistent at one revision, and memory stays at one page per tree level.

use std::io::{self, Write};

use actcd_edge::bbolt::writer::{BoltWriter, Layout};
use actcd_store::backend::etcd_records::{self, EtcdBucket};
use actcd_store::backend::rocks::RocksSnapshot;
use actcd_store::{RocksEngine, StoreError};

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the file (or the reader of the stream went away).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A store's snapshot, measured and ready to be written as etcd's backend.
pub struct EtcdExport<'e> {
    snapshot: RocksSnapshot<'e>,
    layout: Layout,
}

impl<'e> EtcdExport<'e> {
    /// Takes a snapshot of `engine` and measures the file it makes (the first pass).
    pub fn prepare(engine: &'e RocksEngine) -> Result<Self, ExportError> {
        let snapshot = engine.snapshot();
        let mut db = BoltWriter::measure();
        write_buckets(&snapshot, &mut db)?;
        let layout = db.finish()?;
        Ok(EtcdExport { snapshot, layout })
    }

    /// The file's length: whole pages, so a client that appends a SHA-256 can tell it is there.
    pub fn bytes(&self) -> u64 {
        self.layout.bytes()
    }

    /// Writes the file to `out`, front to back.
    pub fn write_to(&self, out: &mut dyn Write) -> Result<(), ExportError> {
        let mut db = BoltWriter::stream(out, self.layout)?;
        write_buckets(&self.snapshot, &mut db)?;
        db.finish()?;
        Ok(())
    }
}

fn write_buckets(snapshot: &RocksSnapshot<'_>, db: &mut BoltWriter<'_>) -> Result<(), ExportError> {
    for name in EtcdBucket::ALL {
        let mut bucket = db.bucket(name.name());
        // The export speaks StoreError: a write error is kept aside and the export stopped.
        let mut failed = None;
        etcd_records::export(snapshot, name, &mut |key, value| match bucket.put(key, value) {
            Ok(()) => Ok(true),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        bucket.finish()?;
    }
    Ok(())
}
