//! Snapshots of the state machine, for a member that fell behind the purged log: RocksDB
//! checkpoints (hard links to the SST files of the moment) kept under `<data-dir>/raft-snapshots`.
//!
//! ```text
//! raft-snapshots/
//!   snap-<term>-<index>-<n>/   a complete checkpoint, and `raft-meta`: the snapshot's meta
//!                              (last log id, membership, id) in postcard. Only the newest is kept.
//!   building-<n>/              a checkpoint being written; a crash leaves it, the next open removes it
//!   receiving-<n>/             where a snapshot sent by the leader is unpacked
//! ```
//!
//! Installing one replaces the state machine's records (history, meta, leases) with the
//! snapshot's in one synced WriteBatch, keeping this member's own binding to its data dir, then
//! rebuilds the index from them.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::storage::Snapshot;
use openraft::{AnyError, SnapshotMeta, StorageError, StorageIOError};

use super::position::recorded_position;
use super::types::{decode, encode, MemberNode, SnapshotFiles, TypeConfig};
use crate::store::mvcc::engine::{Engine, Family, WriteSet};
use crate::store::mvcc::member::MEMBER_KEY;
use crate::store::{RocksEngine, StoreCore};

type Error = StorageError<u64>;
type Meta = SnapshotMeta<u64, MemberNode>;

const META_FILE: &str = "raft-meta";

fn snapshot_error(err: impl std::fmt::Display) -> Error {
    StorageIOError::write_snapshot(None, AnyError::error(err.to_string())).into()
}

/// The snapshots of one member.
#[derive(Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
    next: Arc<AtomicU64>,
}

impl SnapshotStore {
    /// The snapshots under `dir`; what a crash left half-written is removed.
    pub fn open(dir: PathBuf) -> Result<Self, Error> {
        fs::create_dir_all(&dir).map_err(snapshot_error)?;
        for entry in fs::read_dir(&dir).map_err(snapshot_error)? {
            let path = entry.map_err(snapshot_error)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.starts_with("building-") || name.starts_with("receiving-") {
                fs::remove_dir_all(&path).map_err(snapshot_error)?;
            }
        }
        Ok(Self { dir, next: Arc::new(AtomicU64::new(0)) })
    }

    fn scratch(&self, kind: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("{kind}-{}-{n}", std::process::id()))
    }

    /// A fresh directory to receive a snapshot into.
    pub fn receiving_dir(&self) -> PathBuf {
        self.scratch("receiving")
    }

    /// Checkpoints `engine` as the snapshot it now is. The caller holds the core's lock, so
    /// no entry is applied meanwhile.
    pub fn build(&self, engine: &RocksEngine) -> Result<Snapshot<TypeConfig>, Error> {
        let (last_log_id, last_membership) = recorded_position(engine)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{n}", id.leader_id.term, id.index),
            None => format!("0-0-{n}"),
        };
        let meta = Meta { last_log_id, last_membership, snapshot_id };
        self.keep(engine, meta)
    }

    fn keep(&self, engine: &RocksEngine, meta: Meta) -> Result<Snapshot<TypeConfig>, Error> {
        let building = self.scratch("building");
        engine.checkpoint(&building).map_err(snapshot_error)?;
        fs::write(building.join(META_FILE), encode(&meta).map_err(snapshot_error)?)
            .map_err(snapshot_error)?;
        let done = self.dir.join(format!("snap-{}", meta.snapshot_id));
        fs::rename(&building, &done).map_err(snapshot_error)?;
        self.remove_all_but(&done)?;
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotFiles { dir: done }) })
    }

    fn remove_all_but(&self, keep: &Path) -> Result<(), Error> {
        for entry in fs::read_dir(&self.dir).map_err(snapshot_error)? {
            let path = entry.map_err(snapshot_error)?.path();
            let is_snapshot =
                path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("snap-"));
            if is_snapshot && path != keep {
                fs::remove_dir_all(&path).map_err(snapshot_error)?;
            }
        }
        Ok(())
    }

    /// The newest complete snapshot, if any.
    pub fn current(&self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        let mut newest: Option<(Meta, PathBuf)> = None;
        for entry in fs::read_dir(&self.dir).map_err(snapshot_error)? {
            let path = entry.map_err(snapshot_error)?.path();
            if !path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("snap-")) {
                continue;
            }
            let Ok(bytes) = fs::read(path.join(META_FILE)) else {
                continue;
            };
            let meta: Meta = decode(&bytes).map_err(snapshot_error)?;
            if newest.as_ref().is_none_or(|(m, _)| m.last_log_id < meta.last_log_id) {
                newest = Some((meta, path));
            }
        }
        Ok(newest.map(|(meta, dir)| Snapshot { meta, snapshot: Box::new(SnapshotFiles { dir }) }))
    }

    /// Replaces the state in `core` with the checkpoint in `from`, which `meta` describes, and
    /// keeps it as the current snapshot.
    pub fn install(&self, core: &mut StoreCore<RocksEngine>, meta: &Meta, from: &Path) -> Result<(), Error> {
        let snapshot = RocksEngine::open_read_only(from).map_err(snapshot_error)?;
        let live = core.engine();
        let mut set = WriteSet::default();
        for family in [Family::History, Family::Meta, Family::Lease] {
            live.scan(family, &[], &mut |key, _| {
                if !(family == Family::Meta && key == MEMBER_KEY) {
                    set.delete(family, key.to_vec());
                }
                Ok(true)
            })
            .map_err(snapshot_error)?;
            snapshot
                .scan(family, &[], &mut |key, value| {
                    if !(family == Family::Meta && key == MEMBER_KEY) {
                        set.put(family, key.to_vec(), value.to_vec());
                    }
                    Ok(true)
                })
                .map_err(snapshot_error)?;
        }
        drop(snapshot);
        // One synced batch: a crash leaves the old state or the new one, never a mix.
        live.commit(&set).map_err(snapshot_error)?;
        core.reload().map_err(snapshot_error)?;
        let engine = core.engine().clone();
        self.keep(&engine, meta.clone())?;
        if from.starts_with(&self.dir) {
            fs::remove_dir_all(from).map_err(snapshot_error)?;
        }
        Ok(())
    }
}
