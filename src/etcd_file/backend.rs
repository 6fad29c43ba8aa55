//! etcd's backend as a bbolt file holds it, read bucket by bucket (etcd 3.4 and 3.5 write
//! the same buckets):
//!
//! - `key`: revision -> `mvccpb.KeyValue`. The key is 17 bytes, the main revision big-endian,
//!   `_`, the sub revision big-endian; a tombstone's has an 18th byte `t` and its KeyValue
//!   holds only the key. In revision order, as bbolt keeps keys sorted.
//! - `meta`: `scheduledCompactRev` and `finishedCompactRev` as revision keys (the first 8
//!   bytes are the main revision); a compaction scheduled but not finished is finished when
//!   etcd (or actcd, here) next opens the store.
//! - `lease`: lease id (8 bytes big-endian) -> `leasepb.Lease` {ID = 1, TTL = 2}. The keys a
//!   lease holds are not stored with it: each KeyValue names its lease.
//! - `auth`, `authUsers`, `authRoles`: see [`EtcdAuth`].
//!
//! A file from `etcdctl snapshot save` ends with the SHA-256 of the database before it; etcd
//! tells it is there by the length (a database is whole pages: a length that is 32 past a
//! multiple of 512 has the hash), and so does this reader.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use actcd_edge::bbolt::reader::{BoltError, BoltFile, Bucket, Entry};
use actcd_proto::mvccpb::KeyValue;
use actcd_store::backend::etcd_records::{EtcdAuth, LeaseRecord};
use actcd_store::mvcc::hash::{self, HashRecord, RecordVisitor};
use prost::Message;
use sha2::{Digest, Sha256};

/// Why an etcd backend cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The bbolt file itself.
    #[error(transparent)]
    Bolt(#[from] BoltError),
    /// Opening the file.
    #[error("{path}: {error}")]
    Open {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        error: std::io::Error,
    },
    /// The trailing SHA-256 does not match the database.
    #[error("snapshot file integrity check failed: the SHA-256 at its end does not match its {0} bytes")]
    HashMismatch(u64),
    /// A record of etcd's buckets that etcd would not write.
    #[error("invalid database: {0}")]
    Record(String),
}

/// Takes a bucket's keys and values in key order; returns false to stop.
type ValueVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, BackendError> + 'a;

/// One record of the `key` bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdRecord {
    /// The main revision.
    pub main: i64,
    /// The sub revision.
    pub sub: i64,
    /// True for a delete.
    pub tombstone: bool,
    /// The KeyValue as etcd stored it (a tombstone's holds only the key).
    pub kv: KeyValue,
}

/// An etcd backend file, open for reading.
pub struct EtcdBackend {
    bolt: BoltFile,
    /// The database file read.
    pub path: PathBuf,
    /// Bytes of the database (without a snapshot's hash).
    pub bytes: u64,
}

impl EtcdBackend {
    /// Opens `from`: a snapshot file, a backend file, or an etcd data dir (its
    /// `member/snap/db`). A snapshot's trailing hash is checked before anything is read.
    pub fn open(from: &Path) -> Result<EtcdBackend, BackendError> {
        let path =
            if from.is_dir() { from.join("member").join("snap").join("db") } else { from.to_path_buf() };
        let open_error = |error| BackendError::Open { path: path.clone(), error };
        let file = File::open(&path).map_err(open_error)?;
        let len = file.metadata().map_err(open_error)?.len();
        let bytes = if len % 512 == 32 {
            let bytes = len - 32;
            check_sha256(&file, bytes).map_err(|e| match e {
                BackendError::Bolt(BoltError::Io(error)) => BackendError::Open { path: path.clone(), error },
                other => other,
            })?;
            bytes
        } else {
            len
        };
        let bolt = BoltFile::open(file, bytes)?;
        Ok(EtcdBackend { bolt, path, bytes })
    }

    fn bucket(&self, name: &str) -> Result<Option<Bucket>, BackendError> {
        Ok(self.bolt.bucket(name.as_bytes())?)
    }

    /// Visits every value of bucket `name` (none when the bucket is absent).
    fn values(&self, name: &str, visit: &mut ValueVisitor<'_>) -> Result<(), BackendError> {
        let Some(bucket) = self.bucket(name)? else { return Ok(()) };
        self.bolt.for_each(&bucket, &mut |entry| match entry {
            Entry::Value(key, value) => visit(key, value),
            Entry::Bucket(key, _) => Err(BackendError::Record(format!(
                "bucket {name} holds a nested bucket {}",
                String::from_utf8_lossy(key)
            ))),
        })
    }

    /// The compaction revision the store is at once it is opened: the scheduled one (a
    /// compaction etcd scheduled is finished when the store opens).
    pub fn compact_revision(&self) -> Result<i64, BackendError> {
        let mut compacted = 0;
        self.values("meta", &mut |key, value| {
            if key == b"scheduledCompactRev" || key == b"finishedCompactRev" {
                let main = value
                    .get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(i64::from_be_bytes)
                    .ok_or_else(|| {
                    BackendError::Record(format!("meta {}", String::from_utf8_lossy(key)))
                })?;
                compacted = compacted.max(main);
            }
            Ok(true)
        })?;
        Ok(compacted)
    }

    /// Every lease as (id, TTL in seconds).
    pub fn leases(&self) -> Result<Vec<(i64, i64)>, BackendError> {
        let mut leases = Vec::new();
        self.values("lease", &mut |_, value| {
            let lease =
                LeaseRecord::decode(value).map_err(|e| BackendError::Record(format!("lease: {e}")))?;
            leases.push((lease.id, lease.ttl));
            Ok(true)
        })?;
        Ok(leases)
    }

    /// The auth buckets' records, as etcd wrote them.
    pub fn auth(&self) -> Result<EtcdAuth, BackendError> {
        let mut auth = EtcdAuth::default();
        self.values("auth", &mut |key, value| {
            match key {
                b"authEnabled" => auth.enabled = Some(value.to_vec()),
                b"authRevision" => auth.revision = Some(value.to_vec()),
                _ => {}
            }
            Ok(true)
        })?;
        for (bucket, records) in [("authUsers", &mut auth.users), ("authRoles", &mut auth.roles)] {
            self.values(bucket, &mut |key, value| {
                records.push((key.to_vec(), value.to_vec()));
                Ok(true)
            })?;
        }
        Ok(auth)
    }

    /// Visits the `key` bucket's records in revision order until `visit` returns false.
    pub fn records(
        &self,
        visit: &mut dyn FnMut(EtcdRecord) -> Result<bool, BackendError>,
    ) -> Result<(), BackendError> {
        self.values("key", &mut |key, value| visit(record(key, value)?))
    }

    /// etcd's HashKV of this file at its newest revision, with the compaction at
    /// `compacted`: (hash, newest revision).
    pub fn hash_kv(&self, compacted: i64) -> Result<(u32, i64), BackendError> {
        let mut newest = 0;
        self.values("key", &mut |key, value| {
            newest = record(key, value)?.main;
            Ok(true)
        })?;
        let newest = newest.max(compacted);
        let mut scan = |visit: &mut RecordVisitor<'_>| -> Result<(), BackendError> {
            self.values("key", &mut |key, value| {
                let r = record(key, value)?;
                Ok(visit(HashRecord {
                    main: r.main,
                    sub: r.sub,
                    tombstone: r.tombstone,
                    key: &r.kv.key,
                    etcd_key: key,
                    etcd_value: value,
                }))
            })
        };
        Ok((hash::etcd_hash(newest, compacted, &mut scan)?, newest))
    }
}

/// One `key` bucket record, checked.
fn record(key: &[u8], value: &[u8]) -> Result<EtcdRecord, BackendError> {
    let bad = || BackendError::Record(format!("key bucket record {key:02x?}"));
    let tombstone = match (key.len(), key.get(17)) {
        (17, None) => false,
        (18, Some(b't')) => true,
        _ => return Err(bad()),
    };
    if key[8] != b'_' {
        return Err(bad());
    }
    let word = |range: std::ops::Range<usize>| {
        <[u8; 8]>::try_from(&key[range]).map(i64::from_be_bytes).map_err(|_| bad())
    };
    let kv =
        KeyValue::decode(value).map_err(|e| BackendError::Record(format!("KeyValue at {key:02x?}: {e}")))?;
    Ok(EtcdRecord { main: word(0..8)?, sub: word(9..17)?, tombstone, kv })
}

/// Checks the SHA-256 in the last 32 bytes of `file` against the `bytes` before it, reading
/// in 1 MiB pieces.
fn check_sha256(file: &File, bytes: u64) -> Result<(), BackendError> {
    let mut hasher = Sha256::new();
    let mut reader = file.take(bytes);
    let mut piece = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut piece).map_err(BoltError::Io)?;
        if n == 0 {
            break;
        }
        hasher.update(&piece[..n]);
    }
    let mut stored = [0u8; 32];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut stored, bytes).map_err(BoltError::Io)?;
    if hasher.finalize().as_slice() != stored {
        return Err(BackendError::HashMismatch(bytes));
    }
    Ok(())
}
