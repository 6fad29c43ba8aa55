//! An actcd store written out as etcd's backend, a bbolt file: what Maintenance.Snapshot
//! streams, so that `etcdctl snapshot status` reads it, `etcdctl snapshot restore` and etcd
//! itself start from it, and `actcd snapshot restore` takes it back (through [`super::backend`],
//! which reads these same buckets).
//!
//! The buckets, in the bytes etcd 3.4 writes:
//! - `key`: every history record since the compaction, under etcd's revision key, valued
//!   as etcd stores it ([`hash::etcd_record`], which HashKV hashes too);
//! - `lease`: lease id (8 bytes big-endian) -> `leasepb.Lease` {ID, TTL};
//! - `meta`: `consistent_index` (u64 big-endian: the applied Raft index), and when there was
//!   a compaction `finishedCompactRev` and `scheduledCompactRev` (its revision as a
//!   revision key);
//! - `auth`: `authEnabled` (one byte) and `authRevision` (u64 big-endian); `authUsers` and
//!   `authRoles`: name -> `authpb.User` / `authpb.Role`, the bytes actcd stores them in.
//!
//! Left out: `alarm` (an alarm names the member that raised it, and a restored cluster has
//! new members), `members` and `cluster` (`etcdctl snapshot restore` writes new ones, and
//! etcd 3.4 reads neither from a snapshot).
//!
//! Everything is read from one RocksDB snapshot, twice (see [`super::bbolt_writer`]): the
//! file is consistent at one revision, and memory stays at one page per tree level.

use std::io::{self, Write};

use actcd_store::auth_store::auth_state::{ENABLED_KEY, REVISION_KEY, ROLE_PREFIX, USER_PREFIX};
use actcd_store::backend::codec::{self, APPLIED_INDEX_KEY, COMPACTED_KEY};
use actcd_store::backend::engine::Family;
use actcd_store::backend::rocks::RocksSnapshot;
use actcd_store::mvcc::hash;
use actcd_store::mvcc::revision::Revision;
use actcd_store::{RocksEngine, StoreError};
use prost::Message;

use super::backend::LeaseRecord;
use super::bbolt_writer::{BoltWriter, BucketWriter, Layout};

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
    let mut bucket = db.bucket(b"key");
    copy(snapshot, Family::History, &[], &mut bucket, &mut |key, value| {
        let revision =
            Revision::from_key_bytes(key).map_err(|e| StoreError::Corrupt(format!("history key: {e}")))?;
        let (tombstone, kv) = codec::decode_history_value(value)?;
        Ok(Some(hash::etcd_record(revision, tombstone, &kv)))
    })?;
    bucket.finish()?;

    let mut bucket = db.bucket(b"lease");
    copy(snapshot, Family::Lease, &[], &mut bucket, &mut |key, value| {
        let (id, ttl) = (codec::decode_i64(key)?, codec::decode_i64(value)?);
        Ok(Some((id.to_be_bytes().to_vec(), LeaseRecord { id, ttl }.encode_to_vec())))
    })?;
    bucket.finish()?;

    let mut bucket = db.bucket(b"meta");
    let applied =
        snapshot.get(Family::Meta, APPLIED_INDEX_KEY)?.map(|v| codec::decode_i64(&v)).transpose()?;
    bucket.put(b"consistent_index", &applied.unwrap_or(0).to_be_bytes())?;
    let compacted = snapshot.get(Family::Meta, COMPACTED_KEY)?.map(|v| codec::decode_i64(&v)).transpose()?;
    if let Some(compacted) = compacted.filter(|c| *c > 0) {
        let revision = hash::etcd_key(Revision::new(compacted, 0), false);
        bucket.put(b"finishedCompactRev", &revision)?;
        bucket.put(b"scheduledCompactRev", &revision)?;
    }
    bucket.finish()?;

    let mut bucket = db.bucket(b"auth");
    if let Some(enabled) = snapshot.get(Family::Meta, ENABLED_KEY)? {
        bucket.put(b"authEnabled", &enabled)?;
    }
    if let Some(revision) = snapshot.get(Family::Meta, REVISION_KEY)? {
        bucket.put(b"authRevision", &revision)?;
    }
    bucket.finish()?;

    for (name, prefix) in [(&b"authUsers"[..], USER_PREFIX), (b"authRoles", ROLE_PREFIX)] {
        let mut bucket = db.bucket(name);
        copy(snapshot, Family::Meta, prefix, &mut bucket, &mut |key, value| {
            Ok(key.strip_prefix(prefix).map(|name| (name.to_vec(), value.to_vec())))
        })?;
        bucket.finish()?;
    }
    Ok(())
}

/// Makes an etcd bucket's key and value of an actcd record, or nothing to end the bucket.
type MakeRecord<'a> = dyn FnMut(&[u8], &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>, StoreError> + 'a;

/// Puts into `bucket` what `record` makes of each record of `family` from `from` on, until
/// it makes nothing.
fn copy(
    snapshot: &RocksSnapshot<'_>,
    family: Family,
    from: &[u8],
    bucket: &mut BucketWriter<'_, '_>,
    record: &mut MakeRecord<'_>,
) -> Result<(), ExportError> {
    // The scan's visitor speaks StoreError: a write error is kept aside and the scan stopped.
    let mut failed = None;
    snapshot.scan(family, from, &mut |key, value| {
        let Some((key, value)) = record(key, value)? else { return Ok(false) };
        match bucket.put(&key, &value) {
            Ok(()) => Ok(true),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        }
    })?;
    failed.map_or(Ok(()), |e| Err(e.into()))
}
