//! The Raft log: its entries in the write-ahead log's segment files ([`super::wal`], in
//! `<data-dir>/raft-wal/`), its vote and marks in a RocksDB column family of the store's own
//! database:
//!
//! ```text
//! raft-wal/  one record per entry, the entry in postcard: log id, then
//!            Blank | Normal(Proposal) | Membership
//! raft_meta  "vote"        the last vote granted or held (written with fsync before the
//!                          vote is answered: a member must never vote twice in a term)
//!            "committed"   the last log id known committed (no fsync of its own: losing it
//!                          only means a restart re-learns it from the leader or re-commits)
//!            "purged"      the last log id purged (with fsync, before the segments go)
//! raft_log   the entries as data dirs before 2026-12-06 kept them: moved into raft-wal/
//!            when such a dir first opens, then empty
//! ```
//!
//! An append's fsync is the one a write pays for; the state machine writes RocksDB without
//! one (see [`super::state_machine`]): after a crash, the log is replayed over it from the
//! applied log id it wrote with its data. A follower's append is fsynced before openraft
//! hears it is flushed; the leader's own append is fsynced behind, while the followers write
//! theirs, and nothing is applied before it is durable (see [`super::log_durability`]).
//! openraft serializes all calls, so no two writes race.
//!
//! openraft 0.9 reads every entry it applies back from the log, on its core task. Appended
//! entries are therefore kept in memory ([`RecentEntries`], at most [`RECENT_ENTRIES`]) until
//! the state machine has applied them, so that applying a fresh entry costs neither a read
//! nor a decode, and a burst's entries are let go as soon as they are applied; other reads (a
//! slow follower, a restart) go to the disk.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};

use super::fail_stop::FailStop;
use super::log_durability::LogDurability;
use super::types::{decode, encode, TypeConfig};
use super::wal::{self, Syncer, Wal, SEGMENT_BYTES};
use actcd_store::backend::raft_families::RaftFamilies;
use actcd_store::RocksEngine;
use actcd_store::StoreError;

const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const PURGED_KEY: &[u8] = b"purged";

/// Where the write-ahead log lives in the data dir.
pub const WAL_DIR: &str = "raft-wal";

type Error = StorageError<u64>;

/// The Raft log of one member. Clones share it (openraft reads the log from its replication
/// tasks through a clone while the core appends).
#[derive(Clone)]
pub struct LogStore {
    families: RaftFamilies,
    wal: Arc<Mutex<Wal>>,
    syncer: Syncer,
    /// The first index not purged: a purge removes whole segments, so they may still hold
    /// entries before it, which no read returns.
    unpurged: Arc<AtomicU64>,
    fail_stop: FailStop,
    recent: RecentEntries,
    durability: LogDurability,
}

/// Entries kept in memory between their append and their apply: a few batches' worth (the
/// Proposer has at most two in flight). When full, the oldest is dropped (and read from disk
/// if asked for again).
pub const RECENT_ENTRIES: usize = 64;

/// The appended entries not yet applied, consecutive, oldest first; durable like every entry.
/// Shared by the log, which fills it, and the state machine, which empties it as it applies.
#[derive(Clone, Default)]
pub struct RecentEntries(Arc<Mutex<VecDeque<Entry<TypeConfig>>>>);

impl RecentEntries {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Entry<TypeConfig>>> {
        // Holds copies of durable entries only: after a panic elsewhere they are still right.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Lets go of the entries up to `index`, now applied.
    pub fn applied(&self, index: u64) {
        let mut recent = self.lock();
        while recent.front().is_some_and(|entry| entry.log_id.index <= index) {
            recent.pop_front();
        }
        if recent.is_empty() {
            // A burst's worth of room is given back, not kept for the next one.
            recent.shrink_to(RECENT_ENTRIES.min(4));
        }
    }
}

fn io_error(err: impl std::fmt::Display) -> AnyError {
    AnyError::error(err.to_string())
}

impl LogStore {
    /// The log of the data dir `engine` opened, of member `me` (None: every append is fsynced
    /// before it is reported, as when no member can lead). Opening syncs what a killed process
    /// left in the page cache: from now on it counts as durable.
    pub fn open(engine: &RocksEngine, me: Option<u64>) -> Result<Self, Error> {
        Self::open_with(engine, me, SEGMENT_BYTES)
    }

    /// [`Self::open`] with segments of `segment_bytes` (tests keep them small).
    pub fn open_with(engine: &RocksEngine, me: Option<u64>, segment_bytes: u64) -> Result<Self, Error> {
        let families = engine.raft_families();
        let open_error = |e: std::io::Error| StorageIOError::read_logs(io_error(e));
        // The store's own writes a killed process left unsynced count as durable too.
        engine.sync_wal().map_err(|e| StorageIOError::write_logs(io_error(e)))?;
        let dir = families.path().join(WAL_DIR);
        if !dir.exists() {
            move_column_family(&families, &dir, segment_bytes)?;
        }
        let wal = Wal::open(&dir, segment_bytes).map_err(open_error)?;
        let log = Self {
            families,
            syncer: wal.syncer(),
            wal: Arc::new(Mutex::new(wal)),
            unpurged: Arc::default(),
            fail_stop: FailStop::default(),
            recent: RecentEntries::default(),
            durability: LogDurability::new(me),
        };
        let purged: Option<LogId<u64>> = log.meta(PURGED_KEY)?;
        log.unpurged.store(purged.map_or(0, |id| id.index + 1), Ordering::Relaxed);
        Ok(log)
    }

    /// Reports to `fail_stop` when a write fails (see [`super::fail_stop`]).
    pub fn with_fail_stop(mut self, fail_stop: FailStop) -> Self {
        self.fail_stop = fail_stop;
        self
    }

    fn meta<T: for<'a> serde::Deserialize<'a>>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        let read = |e: &dyn std::fmt::Display| StorageIOError::read(AnyError::error(e.to_string()));
        match self.families.meta(key).map_err(|e| read(&e))? {
            Some(bytes) => Ok(Some(decode(&bytes).map_err(|e| read(&e))?)),
            None => Ok(None),
        }
    }

    fn write_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), StoreError> {
        let written = self.families.put_meta(key, value, sync);
        if let Err(err) = &written {
            self.fail_stop.stop(format!("raft log write failed: {err}"));
        }
        written
    }

    fn wal(&self) -> MutexGuard<'_, Wal> {
        // A failed write stops the process (fail-stop); the segments' state is plain numbers.
        self.wal.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A failed write to the segments ends the process (see [`super::fail_stop`]).
    fn wal_failed(&self, what: &str, err: &std::io::Error) {
        self.fail_stop.stop(format!("raft log {what} failed: {err}"));
    }

    fn recent(&self) -> MutexGuard<'_, VecDeque<Entry<TypeConfig>>> {
        self.recent.lock()
    }

    /// The entries kept between append and apply, for the state machine to empty.
    pub fn recent_entries(&self) -> RecentEntries {
        self.recent.clone()
    }

    /// How far the log is durable, for the state machine to wait on.
    pub fn durability(&self) -> LogDurability {
        self.durability.clone()
    }

    /// The entries of `start..end` if all are in memory.
    fn recent_range(&self, start: u64, end: u64) -> Option<Vec<Entry<TypeConfig>>> {
        let recent = self.recent();
        let first = recent.front()?.log_id.index;
        let last = recent.back()?.log_id.index;
        if start < first || end > last + 1 || start >= end {
            return None;
        }
        let from = (start - first) as usize;
        Some(recent.range(from..from + (end - start) as usize).cloned().collect())
    }

    /// The entries of `start..end` the segments hold, from the disk.
    fn read(&self, start: u64, end: u64) -> Result<Vec<Entry<TypeConfig>>, Error> {
        let start = start.max(self.unpurged.load(Ordering::Relaxed));
        let records = self.wal().read(start, end).map_err(|e| StorageIOError::read_logs(io_error(e)))?;
        records
            .into_iter()
            .map(|(index, bytes)| {
                decode(&bytes).map_err(|e| StorageIOError::read_log_at_index(index, AnyError::new(&e)).into())
            })
            .collect()
    }

    fn last_entry_id(&self) -> Result<Option<LogId<u64>>, Error> {
        let Some((_, last)) = self.wal().bounds() else { return Ok(None) };
        if last < self.unpurged.load(Ordering::Relaxed) {
            return Ok(None);
        }
        Ok(self.read(last, last + 1)?.pop().map(|entry| entry.log_id))
    }
}

/// Moves the entries a data dir from before the write-ahead log kept in RocksDB into a new
/// one at `dir`: written and synced under another name first, so that a crash half way leaves
/// the column family the only log, and the next open moves it again.
fn move_column_family(families: &RaftFamilies, dir: &Path, segment_bytes: u64) -> Result<(), Error> {
    let fail = |e: &dyn std::fmt::Display| StorageIOError::write_logs(AnyError::error(e.to_string()));
    let sync_parent = || dir.parent().map_or(Ok(()), wal::sync_dir).map_err(|e| fail(&e));
    if !families.has_legacy_entries().map_err(|e| fail(&e))? {
        // A new data dir (or one moved before): an empty log, its first segment made on open.
        std::fs::create_dir(dir).map_err(|e| fail(&e))?;
        sync_parent()?;
        return Ok(());
    }
    let building = dir.with_extension("new");
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(|e| fail(&e))?;
    }
    let mut wal = Wal::open(&building, segment_bytes).map_err(|e| fail(&e))?;
    let mut moved = 0u64;
    families
        .legacy_entries(&mut |value| {
            let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(e.to_string());
            let entry: Entry<TypeConfig> = decode(value).map_err(|e| corrupt(&e))?;
            wal.append(entry.log_id.index, [value], false).map_err(|e| corrupt(&e))?;
            moved += 1;
            Ok(())
        })
        .map_err(|e| fail(&e))?;
    wal.syncer().sync().map_err(|e| fail(&e))?;
    drop(wal);
    std::fs::rename(&building, dir).map_err(|e| fail(&e))?;
    sync_parent()?;
    tracing::info!(entries = moved, "moved the raft log out of RocksDB into {}", dir.display());
    families.clear_legacy_entries().map_err(|e| fail(&e))?;
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, Error> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        if let Some(entries) = self.recent_range(start, end) {
            return Ok(entries);
        }
        self.read(start, end)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, Error> {
        let last_purged_log_id: Option<LogId<u64>> = self.meta(PURGED_KEY)?;
        // Segments may still hold entries up to the purge point (a purge removes whole ones).
        let last_log_id = self.last_entry_id()?.max(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), Error> {
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.write_meta(VOTE_KEY, &bytes, true).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.durability.voted(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, Error> {
        self.meta(VOTE_KEY)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), Error> {
        let bytes = encode(&committed).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        self.write_meta(COMMITTED_KEY, &bytes, false)
            .map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, Error> {
        Ok(self.meta::<Option<LogId<u64>>>(COMMITTED_KEY)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        let (first, last) = (first.log_id.index, last.log_id.index);
        let mut records = Vec::with_capacity(entries.len());
        for entry in &entries {
            records.push(
                encode(entry)
                    .map_err(|e| StorageIOError::write_log_entry(entry.log_id, AnyError::new(&e)))?,
            );
        }
        // Proposed, not written: nothing of the entries may be readable, watched or answered.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("log::before_append");
        let own = self.durability.owns(&entries);
        let started = std::time::Instant::now();
        let written = self.wal().append(first, records.iter().map(Vec::as_slice), !own);
        if !own {
            // Durable in the log, but neither applied, visible nor answered yet.
            #[cfg(feature = "failpoints")]
            fail::fail_point!("log::after_fsync");
            metrics::histogram!(actcd_store::metric_names::ETCD_DISK_WAL_FSYNC_DURATION_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::counter!(actcd_store::metric_names::ACTCD_STORE_FSYNCS_TOTAL).increment(1);
        }
        match written {
            Ok(()) => {
                if own {
                    self.durability.written_unsynced(last, &self.syncer, &self.fail_stop);
                } else {
                    self.durability.synced(last);
                }
                let mut recent = self.recent();
                for entry in entries {
                    if recent.back().is_some_and(|last| last.log_id.index + 1 != entry.log_id.index) {
                        recent.clear();
                    }
                    recent.push_back(entry);
                    if recent.len() > RECENT_ENTRIES {
                        recent.pop_front();
                    }
                }
                drop(recent);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                self.wal_failed("append", &e);
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(io_error(e)).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), Error> {
        self.recent().retain(|entry| entry.log_id.index < log_id.index);
        if let Err(e) = self.wal().truncate(log_id.index) {
            self.wal_failed("truncation", &e);
            return Err(StorageIOError::write_logs(io_error(e)).into());
        }
        self.durability.truncated(log_id.index.saturating_sub(1));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), Error> {
        self.recent().retain(|entry| entry.log_id.index > log_id.index);
        let bytes = encode(&log_id).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        // Synced before a segment goes, and with it every state-machine write before it (they
        // share RocksDB's WAL): the purged entries are applied, and a restart must find their
        // changes without them.
        self.write_meta(PURGED_KEY, &bytes, true)
            .map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        self.unpurged.fetch_max(log_id.index + 1, Ordering::Relaxed);
        if let Err(e) = self.wal().purge(log_id.index) {
            self.wal_failed("purge", &e);
            return Err(StorageIOError::write_logs(io_error(e)).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    #[test]
    fn applied_entries_leave_memory_and_their_room_is_given_back() {
        let recent = RecentEntries::default();
        let entry = |index| Entry::<TypeConfig> {
            log_id: LogId { leader_id: CommittedLeaderId::new(1, 1), index },
            payload: EntryPayload::Blank,
        };
        recent.lock().extend((1..=RECENT_ENTRIES as u64).map(entry));
        recent.applied(10);
        assert_eq!(recent.lock().front().map(|e| e.log_id.index), Some(11), "up to the applied one are gone");
        recent.applied(RECENT_ENTRIES as u64);
        assert!(recent.lock().is_empty());
        assert!(recent.lock().capacity() < RECENT_ENTRIES, "the burst's room is given back");
    }

    #[tokio::test]
    async fn a_log_kept_in_rocksdb_moves_into_the_segments_once() {
        let dir = tempfile::tempdir().unwrap();
        let engine = RocksEngine::open(dir.path()).unwrap();
        let entry = |index| Entry::<TypeConfig> {
            log_id: LogId { leader_id: CommittedLeaderId::new(2, 1), index },
            payload: EntryPayload::Blank,
        };
        {
            // As a data dir from before the write-ahead log holds its entries.
            let families = engine.raft_families();
            for index in 4..=9u64 {
                families.put_legacy_entry(index, &encode(&entry(index)).unwrap()).unwrap();
            }
        }
        let mut log = LogStore::open_with(&engine, None, 1 << 12).unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(entry(9).log_id));
        let moved = log.try_get_log_entries(4..10).await.unwrap();
        assert_eq!(moved.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), (4..=9).collect::<Vec<_>>());
        assert!(!engine.raft_families().has_legacy_entries().unwrap(), "the column family is emptied");
        drop(log);
        let mut log = LogStore::open_with(&engine, None, 1 << 12).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap().last_log_id,
            Some(entry(9).log_id),
            "opened again: as it was"
        );
    }
}
