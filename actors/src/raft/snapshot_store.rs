//! Snapshots of the state machine, for a member that fell behind the purged log: RocksDB
//! checkpoints (hard links to the SST files of the moment) kept under `<data-dir>/raft-snapshots`.
//!
//! ```text
//! raft-snapshots/
//!   snap-<term>-<index>-<n>/   a complete checkpoint, and `raft-meta`: the snapshot's meta
//!                              (last log id, membership, id) in postcard. Only the newest is kept,
//!                              and an older one while it is being sent (see [`InUse`]).
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
use std::sync::{Arc, Mutex, Weak};

use openraft::storage::Snapshot;
use openraft::{AnyError, SnapshotMeta, StorageError, StorageIOError};

use super::position::recorded_position;
use super::types::{decode, encode, InUse, MemberNode, SnapshotFiles, TypeConfig};
use crate::store::mvcc::engine::{Engine, Family, WriteSet};
use crate::store::mvcc::member::MEMBER_KEY;
use crate::store::{RocksEngine, StoreCore};

type Error = StorageError<u64>;
type Meta = SnapshotMeta<u64, MemberNode>;

/// The snapshot's meta, inside its checkpoint directory. A sender streams it after every
/// other file, so a receiver that has it whole has the rest (see [`SnapshotStore::is_complete`]).
pub const META_FILE: &str = "raft-meta";

fn snapshot_error(err: impl std::fmt::Display) -> Error {
    StorageIOError::write_snapshot(None, AnyError::error(err.to_string())).into()
}

/// The snapshots of one member.
#[derive(Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
    next: Arc<AtomicU64>,
    /// The snapshots handed out and still alive. A leader streams the current snapshot to a
    /// follower while it goes on applying, and applying builds a newer one every
    /// --snapshot-count commands; removing the old directory under the stream would cut it
    /// short. Under this lock a snapshot is picked and held, and old ones are removed.
    held: Arc<Mutex<Vec<Weak<InUse>>>>,
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
        Ok(Self { dir, next: Arc::new(AtomicU64::new(0)), held: Arc::default() })
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
        let mut held = self.held();
        self.remove_all_but(&done, &held)?;
        let files = Self::hold(&mut held, done);
        Ok(Snapshot { meta, snapshot: Box::new(files) })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<Weak<InUse>>> {
        // A list of weak pointers, never left half-changed: still right after a panic elsewhere.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn hold(held: &mut Vec<Weak<InUse>>, dir: PathBuf) -> SnapshotFiles {
        let in_use = Arc::new(InUse { dir: dir.clone() });
        // Pruned at every hold, which every build and every send makes: the list stays as
        // long as the snapshots alive, even on an idle cluster whose follower keeps refusing.
        held.retain(|w| w.strong_count() > 0);
        held.push(Arc::downgrade(&in_use));
        SnapshotFiles { dir, in_use: Some(in_use) }
    }

    /// Removes every snapshot but `keep` and those still held.
    fn remove_all_but(&self, keep: &Path, held: &[Weak<InUse>]) -> Result<(), Error> {
        let in_use: Vec<PathBuf> = held.iter().filter_map(Weak::upgrade).map(|h| h.dir.clone()).collect();
        for entry in fs::read_dir(&self.dir).map_err(snapshot_error)? {
            let path = entry.map_err(snapshot_error)?.path();
            let is_snapshot =
                path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("snap-"));
            if is_snapshot && path != keep && !in_use.contains(&path) {
                fs::remove_dir_all(&path).map_err(snapshot_error)?;
            }
        }
        Ok(())
    }

    /// The newest complete snapshot, if any, held on disk while the answer lives.
    pub fn current(&self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        let mut held = self.held();
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
        Ok(newest.map(|(meta, dir)| Snapshot { meta, snapshot: Box::new(Self::hold(&mut held, dir)) }))
    }

    /// Whether the checkpoint received into `dir` is the whole snapshot `meta` names: a
    /// stream cut short (the sender could not read a file, or its connection broke) lacks the
    /// meta file, which comes last, and another snapshot's carries another id.
    pub fn is_complete(dir: &Path, meta: &Meta) -> bool {
        let Ok(bytes) = fs::read(dir.join(META_FILE)) else { return false };
        decode::<Meta>(&bytes).is_ok_and(|got| got == *meta)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_dirs(store: &SnapshotStore) -> usize {
        fs::read_dir(&store.dir)
            .expect("listed")
            .filter(|e| e.as_ref().expect("entry").file_name().to_string_lossy().starts_with("snap-"))
            .count()
    }

    /// A leader streams its current snapshot while applying goes on and builds newer ones:
    /// the one being sent stays on disk until the send lets it go.
    #[test]
    fn a_snapshot_being_sent_outlives_newer_builds_and_goes_after() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&dir.path().join("db")).expect("rocksdb opens");
        let store = SnapshotStore::open(dir.path().join("snapshots")).expect("snapshots");
        drop(store.build(&engine).expect("first build"));
        let sending = store.current().expect("listed").expect("one snapshot");
        let first = sending.snapshot.dir.clone();
        let second = store.build(&engine).expect("second build").snapshot.dir.clone();
        assert_ne!(first, second);
        assert!(first.join(META_FILE).exists(), "held by the send: kept though older");
        assert_eq!(snapshot_dirs(&store), 2);
        drop(sending);
        let third = store.build(&engine).expect("third build").snapshot.dir.clone();
        assert!(!first.exists() && !second.exists(), "nothing holds them: removed by the next build");
        assert!(third.join(META_FILE).exists());
        assert_eq!(snapshot_dirs(&store), 1);
    }

    /// A received checkpoint counts only with the meta file of the snapshot its header names.
    #[test]
    fn a_received_snapshot_is_complete_only_with_its_own_meta_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&dir.path().join("db")).expect("rocksdb opens");
        let store = SnapshotStore::open(dir.path().join("snapshots")).expect("snapshots");
        let built = store.build(&engine).expect("built");
        assert!(SnapshotStore::is_complete(&built.snapshot.dir, &built.meta));
        let other = Meta { snapshot_id: "another".into(), ..built.meta.clone() };
        assert!(!SnapshotStore::is_complete(&built.snapshot.dir, &other), "another snapshot's meta");
        fs::remove_file(built.snapshot.dir.join(META_FILE)).expect("removed");
        assert!(!SnapshotStore::is_complete(&built.snapshot.dir, &built.meta), "cut before the meta file");
    }
}
