//! The Raft log on RocksDB, in two column families of the store's own database:
//!
//! ```text
//! raft_log   key = entry index, 8 bytes big-endian (so key order is log order)
//!            value = the entry in postcard: log id, then Blank | Normal(Proposal) | Membership
//! raft_meta  "vote"        the last vote granted or held (written with fsync before the
//!                          vote is answered: a member must never vote twice in a term)
//!            "committed"   the last log id known committed (no fsync of its own: losing it
//!                          only means a restart re-learns it from the leader or re-commits)
//!            "purged"      the last log id purged; entries up to it are gone
//! ```
//!
//! Every append is one WriteBatch, and its fsync is the one a write pays for (the state
//! machine writes without one, see [`super::state_machine`]); because both share one WAL it
//! also makes durable every state-machine write applied before it. A follower's append is
//! fsynced before openraft hears it is flushed; the leader's own append is fsynced behind,
//! while the followers write theirs, and nothing is applied before it is durable (see
//! [`super::log_durability`]). openraft serializes all calls, so no two writes race.
//!
//! openraft 0.9 reads every entry it applies back from the log, on its core task. Appended
//! entries are therefore kept in memory ([`RecentEntries`], at most [`RECENT_ENTRIES`]) until
//! the state machine has applied them, so that applying a fresh entry costs neither a RocksDB
//! read nor a decode, and a burst's entries are let go as soon as they are applied; other
//! reads (a slow follower, a restart) go to the disk.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions, DB};

use super::fail_stop::FailStop;
use super::log_durability::LogDurability;
use super::types::{decode, encode, TypeConfig};
use crate::store::mvcc::rocks::{META_CF, RAFT_LOG_CF, RAFT_META_CF};
use crate::store::RocksEngine;

const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const PURGED_KEY: &[u8] = b"purged";

type Error = StorageError<u64>;

/// The Raft log of one member. Clones share the database (openraft reads the log from its
/// replication tasks through a clone while the core appends).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
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

impl LogStore {
    /// The log in `engine`'s database, of member `me` (None: every append is fsynced before
    /// it is reported, as when no member can lead). Syncs the WAL first: entries a killed
    /// process wrote without fsync are in the page cache, and from now on count as durable.
    pub fn open(engine: &RocksEngine, me: Option<u64>) -> Result<Self, Error> {
        let db = Arc::clone(engine.db());
        db.flush_wal(true).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        Ok(Self {
            db,
            fail_stop: FailStop::default(),
            recent: RecentEntries::default(),
            durability: LogDurability::new(me),
        })
    }

    /// Reports to `fail_stop` when a write fails (see [`super::fail_stop`]).
    pub fn with_fail_stop(mut self, fail_stop: FailStop) -> Self {
        self.fail_stop = fail_stop;
        self
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily, Error> {
        self.db.cf_handle(name).ok_or_else(|| {
            StorageIOError::read(AnyError::error(format!("column family {name} is missing"))).into()
        })
    }

    fn meta<T: for<'a> serde::Deserialize<'a>>(&self, key: &[u8]) -> Result<Option<T>, Error> {
        let read = |e: &dyn std::fmt::Display| StorageIOError::read(AnyError::error(e.to_string()));
        match self.db.get_cf(self.cf(RAFT_META_CF)?, key).map_err(|e| read(&e))? {
            Some(bytes) => Ok(Some(decode(&bytes).map_err(|e| read(&e))?)),
            None => Ok(None),
        }
    }

    fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), rocksdb::Error> {
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        let written = self.db.write_opt(batch, &opts);
        if let Err(err) = &written {
            self.fail_stop.stop(format!("raft log write failed: {err}"));
        }
        written
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

    fn last_entry_id(&self) -> Result<Option<LogId<u64>>, Error> {
        let mut iter = self.db.iterator_cf(self.cf(RAFT_LOG_CF)?, IteratorMode::End);
        match iter.next() {
            Some(Ok((_, value))) => {
                let entry: Entry<TypeConfig> =
                    decode(&value).map_err(|e| StorageIOError::read_logs(AnyError::new(&e)))?;
                Ok(Some(entry.log_id))
            }
            Some(Err(e)) => Err(StorageIOError::read_logs(AnyError::new(&e)).into()),
            None => Ok(None),
        }
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
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
            Bound::Included(i) => Some(i.saturating_add(1)),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        if let Some(entries) = end.and_then(|end| self.recent_range(start, end)) {
            return Ok(entries);
        }
        let from = index_key(start);
        let mode = IteratorMode::From(&from, Direction::Forward);
        let mut entries = Vec::new();
        for item in self.db.iterator_cf(self.cf(RAFT_LOG_CF)?, mode) {
            let (key, value) = item.map_err(|e| StorageIOError::read_logs(AnyError::new(&e)))?;
            let index = u64::from_be_bytes(key.as_ref().try_into().map_err(|_| {
                StorageIOError::read_logs(AnyError::error(format!("a log key of {} bytes", key.len())))
            })?);
            if !range.contains(&index) {
                break;
            }
            entries.push(
                decode(&value).map_err(|e| StorageIOError::read_log_at_index(index, AnyError::new(&e)))?,
            );
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, Error> {
        let last_purged_log_id: Option<LogId<u64>> = self.meta(PURGED_KEY)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), Error> {
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(RAFT_META_CF)?, VOTE_KEY, bytes);
        self.write(batch, true).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.durability.voted(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, Error> {
        self.meta(VOTE_KEY)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), Error> {
        let bytes = encode(&committed).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(RAFT_META_CF)?, COMMITTED_KEY, bytes);
        self.write(batch, false).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
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
        let cf = self.cf(RAFT_LOG_CF)?;
        let mut batch = WriteBatch::default();
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        for entry in &entries {
            let bytes = encode(entry)
                .map_err(|e| StorageIOError::write_log_entry(entry.log_id, AnyError::new(&e)))?;
            batch.put_cf(cf, index_key(entry.log_id.index), bytes);
        }
        // Proposed, not written: nothing of the entries may be readable, watched or answered.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("store::before_commit");
        let last = entries.last().map_or(0, |entry| entry.log_id.index);
        let own = self.durability.owns(&entries);
        let written = if own {
            self.write(batch, false)
        } else {
            let started = std::time::Instant::now();
            let written = self.write(batch, true);
            // Durable in the log, but neither applied, visible nor answered yet.
            #[cfg(feature = "failpoints")]
            fail::fail_point!("store::after_fsync");
            metrics::histogram!(crate::metric_names::ETCD_DISK_WAL_FSYNC_DURATION_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::counter!(crate::metric_names::ACTCD_STORE_FSYNCS_TOTAL).increment(1);
            written
        };
        match written {
            Ok(()) => {
                if own {
                    self.durability.written_unsynced(last, &self.db, &self.fail_stop);
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
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(AnyError::new(&e)).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), Error> {
        self.recent().retain(|entry| entry.log_id.index < log_id.index);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.cf(RAFT_LOG_CF)?, index_key(log_id.index), index_key(u64::MAX));
        batch.delete_cf(self.cf(RAFT_LOG_CF)?, index_key(u64::MAX));
        self.write(batch, true).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        self.durability.truncated(log_id.index.saturating_sub(1));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), Error> {
        self.recent().retain(|entry| entry.log_id.index > log_id.index);
        let bytes = encode(&log_id).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(RAFT_META_CF)?, PURGED_KEY, bytes);
        batch.delete_range_cf(self.cf(RAFT_LOG_CF)?, index_key(0), index_key(log_id.index.saturating_add(1)));
        // Purged entries are applied and in a snapshot: losing this write to a crash only
        // leaves entries that the next purge removes.
        self.write(batch, false).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
        Ok(())
    }
}

/// Forgets every trace of the cluster a data dir was part of: the log, the vote, and the
/// state machine's applied position and membership, so that the member that opens it next
/// forms a new cluster from its flags over the data. What `actcd snapshot restore` needs, as
/// etcd's restore starts a fresh log with the membership of the restoring flags.
pub fn forget_cluster(engine: &RocksEngine) -> Result<(), crate::store::StoreError> {
    use crate::store::mvcc::codec::{RAFT_APPLIED_KEY, RAFT_MEMBERSHIP_KEY};
    use crate::store::StoreError;
    let db = engine.db();
    let mut batch = WriteBatch::default();
    for name in [RAFT_LOG_CF, RAFT_META_CF] {
        let cf = db
            .cf_handle(name)
            .ok_or_else(|| StoreError::Corrupt(format!("column family {name} is missing")))?;
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (key, _) = item?;
            batch.delete_cf(cf, key);
        }
    }
    let meta = db
        .cf_handle(META_CF)
        .ok_or_else(|| StoreError::Corrupt(format!("column family {META_CF} is missing")))?;
    batch.delete_cf(meta, RAFT_APPLIED_KEY);
    batch.delete_cf(meta, RAFT_MEMBERSHIP_KEY);
    let mut opts = WriteOptions::default();
    opts.set_sync(true);
    db.write_opt(batch, &opts)?;
    Ok(())
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
}
