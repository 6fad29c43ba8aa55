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
//!   installing/                a received snapshot while it is copied into the live state;
//!                              found at start, the copy was cut short and is done again
//! ```
//!
//! Installing one replaces the state machine's records (history, meta, leases) with the
//! snapshot's, keeping this member's own binding to its data dir, then rebuilds the index from
//! them. The copy goes in batches of [`COPY_BATCH_BYTES`], so a member that catches up on a
//! store of any size holds one batch, not the store (one WriteBatch of 1M keys x 1 KiB took
//! 3 GB). Between the first batch and the last the live state is a mix, so the snapshot is
//! first moved to `installing/`: a crash meanwhile leaves it there, and the next start
//! ([`SnapshotStore::resume_install`]) copies it again before anything reads the state.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use openraft::storage::Snapshot;
use openraft::{AnyError, SnapshotMeta, StorageError, StorageIOError};

use super::position::recorded_position;
use super::types::{decode, encode, InUse, MemberNode, SnapshotFiles, TypeConfig};
use actcd_store::backend::engine::{Engine, Family, WriteSet};
use actcd_store::backend::member::MEMBER_KEY;
use actcd_store::{RocksEngine, StoreCore};

type Error = StorageError<u64>;
type Meta = SnapshotMeta<u64, MemberNode>;

/// The snapshot's meta, inside its checkpoint directory. A sender streams it after every
/// other file, so a receiver that has it whole has the rest (see [`SnapshotStore::is_complete`]).
pub const META_FILE: &str = "raft-meta";

/// The snapshot being copied into the live state (see the module doc).
const INSTALLING: &str = "installing";

/// Key and value bytes per batch of an install: large enough that the batches' own cost is
/// lost in the copy, small beside the memory a member runs in.
pub const COPY_BATCH_BYTES: usize = 8 << 20;

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
    /// keeps it as the current snapshot. `from` is moved into this store's directory.
    pub fn install(&self, core: &mut StoreCore<RocksEngine>, meta: &Meta, from: &Path) -> Result<(), Error> {
        let staged = self.dir.join(INSTALLING);
        if staged.exists() {
            fs::remove_dir_all(&staged).map_err(snapshot_error)?;
        }
        fs::rename(from, &staged).map_err(snapshot_error)?;
        sync_dir(&self.dir)?;
        copy_state(&staged, core.engine(), COPY_BATCH_BYTES)?;
        core.reload().map_err(snapshot_error)?;
        let engine = core.engine().clone();
        self.finish_install(&engine, meta.clone(), &staged)
    }

    /// Completes an install that a crash cut short, before the state is read: true if there
    /// was one. A snapshot received whole but not yet copied at all is copied too: the log
    /// below it may be gone (openraft purges after the install returns, but does not promise
    /// the order to the disk).
    pub fn resume_install(&self, engine: &RocksEngine) -> Result<bool, Error> {
        let staged = self.dir.join(INSTALLING);
        let Ok(bytes) = fs::read(staged.join(META_FILE)) else {
            // Moved here only once complete: without its meta file it is not a snapshot.
            if staged.exists() {
                fs::remove_dir_all(&staged).map_err(snapshot_error)?;
            }
            return Ok(false);
        };
        let meta: Meta = decode(&bytes).map_err(snapshot_error)?;
        copy_state(&staged, engine, COPY_BATCH_BYTES)?;
        self.finish_install(engine, meta, &staged)?;
        Ok(true)
    }

    fn finish_install(&self, engine: &RocksEngine, meta: Meta, staged: &Path) -> Result<(), Error> {
        self.keep(engine, meta)?;
        fs::remove_dir_all(staged).map_err(snapshot_error)?;
        sync_dir(&self.dir)
    }
}

/// Makes `dir`'s entries (a rename, a removal) durable.
fn sync_dir(dir: &Path) -> Result<(), Error> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(snapshot_error)
}

/// Makes the state machine's records in `live` those of the checkpoint at `from` (this
/// member's binding to its data dir aside), in batches of about `batch_bytes`: first every
/// live record is deleted, then every record of the checkpoint put. Only the last batch is
/// synced; RocksDB's log is written in order, so that sync makes the earlier batches durable too.
fn copy_state(from: &Path, live: &RocksEngine, batch_bytes: usize) -> Result<(), Error> {
    let snapshot = RocksEngine::open_read_only(from).map_err(snapshot_error)?;
    let mut set = WriteSet::default();
    // A full batch is written when the next record comes, so the last one is never empty.
    let make_room = |set: &mut WriteSet| -> Result<(), actcd_store::StoreError> {
        if set.heap_bytes() >= batch_bytes {
            live.commit_by_log(&std::mem::take(set))?;
        }
        Ok(())
    };
    let kept = |family: Family, key: &[u8]| family == Family::Meta && key == MEMBER_KEY;
    for family in [Family::History, Family::Meta, Family::Lease] {
        live.scan(family, &[], &mut |key, _| {
            if !kept(family, key) {
                make_room(&mut set)?;
                set.delete(family, key.to_vec());
            }
            Ok(true)
        })
        .map_err(snapshot_error)?;
    }
    for family in [Family::History, Family::Meta, Family::Lease] {
        snapshot
            .scan(family, &[], &mut |key, value| {
                if !kept(family, key) {
                    make_room(&mut set)?;
                    set.put(family, key.to_vec(), value.to_vec());
                }
                Ok(true)
            })
            .map_err(snapshot_error)?;
    }
    live.commit(&set).map_err(snapshot_error)
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
    fn records(engine: &RocksEngine) -> Vec<(u8, Vec<u8>, Vec<u8>)> {
        let mut all = Vec::new();
        for (tag, family) in [(0, Family::History), (1, Family::Meta), (2, Family::Lease)] {
            engine
                .scan(family, &[], &mut |k, v| {
                    all.push((tag, k.to_vec(), v.to_vec()));
                    Ok(true)
                })
                .expect("scanned");
        }
        all
    }

    fn fill(engine: &RocksEngine, tag: &str, n: u32) {
        let mut set = WriteSet::default();
        for i in 0..n {
            let key = format!("{tag}{i:05}").into_bytes();
            set.put(Family::History, key.clone(), vec![b'h'; 300]);
            set.put(Family::Lease, key.clone(), b"lease".to_vec());
            set.put(Family::Meta, key, b"meta".to_vec());
        }
        engine.commit(&set).expect("written");
    }

    /// The copy runs in many small batches and leaves exactly the snapshot's records, with this
    /// member's own binding to its data dir kept.
    #[test]
    fn a_copy_in_batches_leaves_the_snapshots_records_and_the_members_own_binding() {
        let dir = tempfile::tempdir().expect("temp dir");
        let leader = RocksEngine::open(&dir.path().join("leader")).expect("rocksdb opens");
        fill(&leader, "a", 2000);
        let checkpoint = dir.path().join("checkpoint");
        leader.checkpoint(&checkpoint).expect("checkpointed");
        let member = RocksEngine::open(&dir.path().join("member")).expect("rocksdb opens");
        fill(&member, "b", 500);
        let mut binding = WriteSet::default();
        binding.put(Family::Meta, MEMBER_KEY.to_vec(), b"this member".to_vec());
        member.commit(&binding).expect("bound");

        copy_state(&checkpoint, &member, 16 << 10).expect("copied");

        let mut expected = records(&leader);
        expected.push((1, MEMBER_KEY.to_vec(), b"this member".to_vec()));
        expected.sort();
        let mut got = records(&member);
        got.sort();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the member holds the snapshot's records and its own binding");
    }

    /// A stop between an install's first batch and its last leaves the snapshot in
    /// `installing/`; the next start copies it again, whatever mix the state was left in.
    #[test]
    fn an_install_cut_short_is_done_again_at_the_next_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let leader = RocksEngine::open(&dir.path().join("leader")).expect("rocksdb opens");
        fill(&leader, "a", 300);
        let store = SnapshotStore::open(dir.path().join("snapshots")).expect("snapshots");
        let built = store.build(&leader).expect("built");
        let member = RocksEngine::open(&dir.path().join("member")).expect("rocksdb opens");
        assert!(!store.resume_install(&member).expect("nothing to resume"), "no install was cut short");
        // A cut-short copy: some old records deleted, some of the snapshot's written.
        fill(&member, "a", 100);
        fill(&member, "z", 100);
        fs::rename(&built.snapshot.dir, store.dir.join(INSTALLING)).expect("staged");
        drop(built);
        let reopened = SnapshotStore::open(store.dir.clone()).expect("a start keeps installing/");

        assert!(reopened.resume_install(&member).expect("resumed"), "the cut install is found");

        assert_eq!(records(&member), records(&leader), "exactly the snapshot's records");
        assert!(!store.dir.join(INSTALLING).exists(), "done: the staged copy is gone");
        assert!(reopened.current().expect("listed").is_some(), "kept as the current snapshot");
        assert!(!reopened.resume_install(&member).expect("nothing left"), "done once");
    }
}
