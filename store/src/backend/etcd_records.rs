//! The stores' records in etcd's terms, for the two ways data crosses between etcd and actcd as
//! a file: a snapshot of this store read out as etcd's backend buckets (`etcdctl snapshot
//! save`, Maintenance.Snapshot), and etcd's history written in as a new store (`actcd
//! migrate`). The bbolt file around them is the edge's (edge/src/bbolt/); what the records are
//! is the store's, here beside the codec that defines them, so nothing else reads or writes
//! them.
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

use actcd_proto::mvccpb::KeyValue;
use prost::Message;

use super::codec::{self, APPLIED_KEY, COMPACTED_KEY, FORMAT_KEY, FORMAT_VERSION};
use super::engine::{Engine, Family, WriteSet};
use super::rocks::{RocksEngine, RocksSnapshot};
use crate::auth_store::auth_state::{ENABLED_KEY, REVISION_KEY, ROLE_PREFIX, USER_PREFIX};
use crate::error::StoreError;
use crate::mvcc::hash;
use crate::mvcc::revision::Revision;

/// etcd's buckets, in the order its snapshots hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdBucket {
    /// Revision -> mvccpb.KeyValue.
    Key,
    /// Lease id -> leasepb.Lease.
    Lease,
    /// The consistent index and the compaction revisions.
    Meta,
    /// `authEnabled` and `authRevision`.
    Auth,
    /// User name -> authpb.User.
    AuthUsers,
    /// Role name -> authpb.Role.
    AuthRoles,
}

impl EtcdBucket {
    /// Every bucket, in a snapshot's order.
    pub const ALL: [EtcdBucket; 6] = [
        EtcdBucket::Key,
        EtcdBucket::Lease,
        EtcdBucket::Meta,
        EtcdBucket::Auth,
        EtcdBucket::AuthUsers,
        EtcdBucket::AuthRoles,
    ];

    /// Its name in the file.
    pub fn name(self) -> &'static [u8] {
        match self {
            EtcdBucket::Key => b"key",
            EtcdBucket::Lease => b"lease",
            EtcdBucket::Meta => b"meta",
            EtcdBucket::Auth => b"auth",
            EtcdBucket::AuthUsers => b"authUsers",
            EtcdBucket::AuthRoles => b"authRoles",
        }
    }
}

/// etcd's `leasepb.Lease` as the `lease` bucket holds it (3.5 adds a remaining TTL, field 3,
/// which 3.4 neither writes nor reads).
#[derive(Clone, PartialEq, Message)]
pub struct LeaseRecord {
    /// The lease id.
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// The granted TTL, in seconds.
    #[prost(int64, tag = "2")]
    pub ttl: i64,
}

/// The auth store as etcd keeps it: `auth` (`authEnabled`, one byte; `authRevision`, u64
/// big-endian), `authUsers` and `authRoles` (name -> `authpb.User` / `authpb.Role`). actcd keeps
/// the same bytes, so they cross unchanged.
#[derive(Debug, Default)]
pub struct EtcdAuth {
    /// `authEnabled`, when etcd ever wrote it.
    pub enabled: Option<Vec<u8>>,
    /// `authRevision`, when etcd ever wrote it.
    pub revision: Option<Vec<u8>>,
    /// Users by name.
    pub users: Vec<(Vec<u8>, Vec<u8>)>,
    /// Roles by name.
    pub roles: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Takes one record of a bucket, its key and value; false stops the export.
pub type PutRecord<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, StoreError> + 'a;

/// Hands `put` each record of `bucket` as etcd's backend holds it, read from `snapshot`, until
/// `put` returns false.
pub fn export(
    snapshot: &RocksSnapshot<'_>,
    bucket: EtcdBucket,
    put: &mut PutRecord<'_>,
) -> Result<(), StoreError> {
    match bucket {
        EtcdBucket::Key => snapshot.scan(Family::History, &[], &mut |key, value| {
            let revision = Revision::from_key_bytes(key)
                .map_err(|e| StoreError::Corrupt(format!("history key: {e}")))?;
            let (tombstone, kv) = codec::decode_history_value(value)?;
            let (key, value) = hash::etcd_record(revision, tombstone, &kv);
            put(&key, &value)
        }),
        EtcdBucket::Lease => snapshot.scan(Family::Lease, &[], &mut |key, value| {
            let (id, ttl) = (codec::decode_i64(key)?, codec::decode_i64(value)?);
            put(&id.to_be_bytes(), &LeaseRecord { id, ttl }.encode_to_vec())
        }),
        EtcdBucket::Meta => {
            let applied = snapshot.get(Family::Meta, APPLIED_KEY)?.map(|v| codec::decode_applied(&v));
            let applied = applied.transpose()?.map_or(0, |a| a.index);
            if !put(b"consistent_index", &applied.to_be_bytes())? {
                return Ok(());
            }
            let compacted =
                snapshot.get(Family::Meta, COMPACTED_KEY)?.map(|v| codec::decode_i64(&v)).transpose()?;
            if let Some(compacted) = compacted.filter(|c| *c > 0) {
                let revision = hash::etcd_key(Revision::new(compacted, 0), false);
                if put(b"finishedCompactRev", &revision)? {
                    put(b"scheduledCompactRev", &revision)?;
                }
            }
            Ok(())
        }
        EtcdBucket::Auth => {
            let mut going = true;
            if let Some(enabled) = snapshot.get(Family::Meta, ENABLED_KEY)? {
                going = put(b"authEnabled", &enabled)?;
            }
            if let (true, Some(revision)) = (going, snapshot.get(Family::Meta, REVISION_KEY)?) {
                put(b"authRevision", &revision)?;
            }
            Ok(())
        }
        EtcdBucket::AuthUsers | EtcdBucket::AuthRoles => {
            let prefix = if bucket == EtcdBucket::AuthUsers { USER_PREFIX } else { ROLE_PREFIX };
            snapshot.scan(Family::Meta, prefix, &mut |key, value| match key.strip_prefix(prefix) {
                Some(name) => put(name, value),
                None => Ok(false),
            })
        }
    }
}

/// Records written per RocksDB batch: large enough that a batch's overhead vanishes, small
/// enough that a batch holds a few MiB.
const RECORDS_PER_BATCH: usize = 4096;

/// etcd history that an actcd store cannot hold, or the store failing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A revision outside actcd's packed form.
    #[error("revision {main}.{sub}: {why}")]
    Unrepresentable {
        /// The main revision.
        main: i64,
        /// The sub revision.
        sub: i64,
        /// Why.
        why: String,
    },
    /// Writing the store.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new store written from etcd's records: the history in revision order, then the leases,
/// the auth store and the compaction at [`Import::finish`]. Batches are written unsynced: the
/// last one's fsync makes all of them durable, and the caller writes into a staging dir that
/// a crash leaves to be removed.
pub struct Import {
    engine: RocksEngine,
    set: WriteSet,
    in_set: usize,
}

impl Import {
    /// Writes into `engine`, an empty store.
    pub fn new(engine: RocksEngine) -> Self {
        Self { engine, set: WriteSet::default(), in_set: 0 }
    }

    /// One record of etcd's `key` bucket: the change at revision `(main, sub)`.
    pub fn record(&mut self, main: i64, sub: i64, tombstone: bool, kv: KeyValue) -> Result<(), ImportError> {
        let key = Revision::new(main, sub).try_to_key_bytes().map_err(|e| ImportError::Unrepresentable {
            main,
            sub,
            why: e.to_string(),
        })?;
        // actcd's tombstones carry their revision as well as the key.
        let kv =
            if tombstone { KeyValue { key: kv.key, mod_revision: main, ..KeyValue::default() } } else { kv };
        self.set.put(Family::History, key.to_vec(), codec::encode_history_value(tombstone, &kv));
        self.in_set += 1;
        if self.in_set == RECORDS_PER_BATCH {
            self.engine.commit_by_log(&std::mem::take(&mut self.set))?;
            self.in_set = 0;
        }
        Ok(())
    }

    /// Writes the leases, the auth store and the compaction revision with the last records,
    /// synced.
    pub fn finish(mut self, leases: &[(i64, i64)], auth: EtcdAuth, compacted: i64) -> Result<(), StoreError> {
        for (id, ttl) in leases {
            self.set.put(Family::Lease, codec::encode_i64(*id), codec::encode_i64(*ttl));
        }
        if let Some(enabled) = auth.enabled {
            self.set.put(Family::Meta, ENABLED_KEY.to_vec(), enabled);
        }
        if let Some(revision) = auth.revision {
            self.set.put(Family::Meta, REVISION_KEY.to_vec(), revision);
        }
        for (prefix, records) in [(USER_PREFIX, auth.users), (ROLE_PREFIX, auth.roles)] {
            for (name, record) in records {
                self.set.put(Family::Meta, [prefix, &name].concat(), record);
            }
        }
        self.set.put(Family::Meta, COMPACTED_KEY.to_vec(), codec::encode_i64(compacted));
        self.set.put(Family::Meta, FORMAT_KEY.to_vec(), FORMAT_VERSION.to_vec());
        self.engine.commit(&self.set)
    }
}

/// How many history records and leases `engine` holds.
pub fn counts(engine: &RocksEngine) -> Result<(u64, u64), StoreError> {
    let mut counts = [0u64; 2];
    for (family, count) in [Family::History, Family::Lease].into_iter().zip(&mut counts) {
        engine.scan(family, &[], &mut |_, _| {
            *count += 1;
            Ok(true)
        })?;
    }
    Ok((counts[0], counts[1]))
}
