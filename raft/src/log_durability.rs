//! How far the log is durable, and the leader's fsync taken off openraft's path.
//!
//! openraft 0.9's core awaits the log's flush inline: while the leader's fsync runs, its core
//! task handles nothing else, and only after it are the entries sent to the followers. A commit
//! then pays the leader's fsync, the round trip and a follower's fsync in series. etcd's leader
//! writes its WAL while the followers write theirs (Raft thesis §10.2.1), and so does this log:
//!
//! ```text
//!              leader                                  follower
//!  openraft:   append (no fsync) ─ "flushed" ─ send ─────────► append + fsync ─ ack
//!  flusher:        └──── fsync WAL ── durable = n                                  │
//!  apply n:    waits for durable ≥ n  ◄── commit n (leader + follower) ◄──────────┘
//! ```
//!
//! - The leader's own appends (entries of the term it leads, written while its saved vote names
//!   it) go to the log's segment without fsync and are reported flushed at once; a flusher behind
//!   them syncs it, one fsync for everything written meanwhile, and raises [`LogDurability`]'s mark.
//! - Every other append (a follower's, a candidate's) keeps its fsync before openraft hears of
//!   it: the leader counts a follower in a commit only when the follower's copy is durable.
//! - The state machine applies entry n only once the mark reaches n. openraft may count the
//!   leader in a commit before its fsync (etcd 3.4's raft does the same: the leader's progress
//!   moves at append), but a commit needs a majority that includes the leader, so when the
//!   leader applies, answers or shows an entry, a majority holds it on disk.
//! - What stays is etcd's window: a follower may apply an entry committed before the leader's
//!   fsync ended. Only a crash of the leader's machine inside that fsync loses it (a killed
//!   process loses nothing: the page cache keeps what it wrote).
//!
//! A truncation bumps an epoch, so that a flush that started before it cannot vouch for the
//! entries written after it at the same indexes.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use openraft::{Entry, Vote};
use tokio::sync::watch;

use super::fail_stop::FailStop;
use super::types::TypeConfig;
use super::wal::Syncer;

/// The durable mark of one member's log, shared by the log (which moves it) and the state
/// machine (which waits on it). Clones share it.
#[derive(Clone)]
pub struct LogDurability(Arc<Shared>);

struct Shared {
    /// This member: an append is the leader's own when the saved vote names it. None: every
    /// append is synced (openraft's storage suite, which applies entries it never appended).
    me: Option<u64>,
    state: Mutex<State>,
    /// Every index up to it is on disk in the current log. A watch: appliers wait on it.
    durable: watch::Sender<u64>,
}

struct State {
    /// The last vote saved: whose term the appends belong to.
    vote: Option<Vote<u64>>,
    /// The last index written, synced or not.
    written: u64,
    /// Bumped by each truncation: a flush vouches only for the epoch it started in.
    epoch: u64,
    /// Whether a flusher is running (at most one).
    flushing: bool,
}

/// Why an apply cannot go on: the log stopped before the entry was durable.
#[derive(Debug, thiserror::Error)]
#[error("the raft log stopped before index {0} was durable")]
pub struct Stopped(pub u64);

impl LogDurability {
    /// The mark of member `me`'s log as it opens: whatever is on disk then counts as durable
    /// (the log synced its segment), and a wait covers only what is written from now on.
    pub fn new(me: Option<u64>) -> Self {
        let state = State { vote: None, written: 0, epoch: 0, flushing: false };
        Self(Arc::new(Shared { me, state: Mutex::new(state), durable: watch::Sender::new(0) }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain numbers, each written whole: still right after a panic elsewhere.
        self.0.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes the vote openraft saved.
    pub fn voted(&self, vote: Vote<u64>) {
        self.state().vote = Some(vote);
    }

    /// Whether `entries` are this member's own, appended as leader of the saved vote's term:
    /// only those may be reported flushed before their fsync.
    pub fn owns(&self, entries: &[Entry<TypeConfig>]) -> bool {
        let Some(me) = self.0.me else { return false };
        let state = self.state();
        let Some(vote) = &state.vote else { return false };
        vote.leader_id().voted_for() == Some(me)
            && !entries.is_empty()
            && entries.iter().all(|entry| entry.log_id.leader_id == *vote.leader_id())
    }

    /// Entries up to `last` were written with fsync: everything written so far is durable.
    pub fn synced(&self, last: u64) {
        self.synced_locked(&mut self.state(), last);
    }

    /// The log was cut after `last` (with fsync): what a running flush covers may be gone.
    pub fn truncated(&self, last: u64) {
        let mut state = self.state();
        state.epoch += 1;
        self.synced_locked(&mut state, last);
    }

    fn synced_locked(&self, state: &mut State, last: u64) {
        state.written = last;
        self.0.durable.send_replace(last);
    }

    /// Entries up to `last` were written without fsync; a flusher syncs them behind.
    pub fn written_unsynced(&self, last: u64, syncer: &Syncer, fail_stop: &FailStop) {
        let mut state = self.state();
        state.written = last;
        if !state.flushing {
            state.flushing = true;
            let (this, syncer, fail_stop) = (self.clone(), syncer.clone(), fail_stop.clone());
            // A blocking thread: an fsync blocks it for a while, and no async task waits on it
            // but the appliers, through the mark.
            tokio::task::spawn_blocking(move || this.flush_behind(&syncer, &fail_stop));
        }
    }

    /// Syncs the log until nothing written is left unsynced. One fsync covers every write
    /// that came before it, so a burst of appends costs about one fsync each round.
    fn flush_behind(&self, syncer: &Syncer, fail_stop: &FailStop) {
        loop {
            let (target, epoch) = {
                let state = self.state();
                (state.written, state.epoch)
            };
            let started = Instant::now();
            // The target is read before the segment to sync: see [`Syncer`].
            let flushed = syncer.sync();
            metrics::histogram!(actcd_store::metric_names::ETCD_DISK_WAL_FSYNC_DURATION_SECONDS)
                .record(started.elapsed().as_secs_f64());
            metrics::counter!(actcd_store::metric_names::ACTCD_STORE_FSYNCS_TOTAL).increment(1);
            if let Err(err) = flushed {
                // The mark stays: nothing past it is applied, and the process ends.
                fail_stop.stop(format!("raft log fsync failed: {err}"));
                self.state().flushing = false;
                return;
            }
            // Durable in the log, but neither applied, visible nor answered yet.
            #[cfg(feature = "failpoints")]
            fail::fail_point!("log::after_fsync");
            let mut state = self.state();
            if state.epoch == epoch && target > *self.0.durable.borrow() {
                self.0.durable.send_replace(target);
            }
            if state.written <= *self.0.durable.borrow() {
                state.flushing = false;
                return;
            }
        }
    }

    /// Waits until the log is durable up to `index`, or up to the last index written since
    /// the log opened if that is lower (an entry on disk before: replayed after a restart, or
    /// applied without an append by the storage suite).
    pub async fn wait(&self, index: u64) -> Result<(), Stopped> {
        let target = index.min(self.state().written);
        let mut durable = self.0.durable.subscribe();
        durable.wait_for(|mark| *mark >= target).await.map(|_| ()).map_err(|_| Stopped(index))
    }

    /// How far the log is durable.
    pub fn durable(&self) -> u64 {
        *self.0.durable.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{EntryPayload, LeaderId, LogId};

    fn entry(term: u64, leader: u64, index: u64) -> Entry<TypeConfig> {
        Entry { log_id: LogId::new(LeaderId::new(term, leader), index), payload: EntryPayload::Blank }
    }

    #[test]
    fn only_the_leaders_own_entries_of_its_term_skip_the_inline_fsync() {
        let marks = LogDurability::new(Some(1));
        assert!(!marks.owns(&[entry(2, 1, 1)]), "no vote saved yet");
        marks.voted(Vote::new_committed(2, 1));
        assert!(marks.owns(&[entry(2, 1, 1), entry(2, 1, 2)]));
        assert!(!marks.owns(&[entry(1, 1, 1)]), "an entry this member wrote in an older term");
        assert!(!marks.owns(&[]));
        marks.voted(Vote::new_committed(3, 2));
        assert!(!marks.owns(&[entry(3, 2, 3)]), "a follower's append of the leader's entries");
        assert!(!marks.owns(&[entry(2, 1, 2)]), "its own old entries sent back by a new leader");
        assert!(!LogDurability::new(None).owns(&[entry(2, 1, 1)]), "no member: always synced");
    }

    #[tokio::test]
    async fn an_apply_waits_for_the_mark_and_a_truncation_voids_a_running_flush() {
        let marks = LogDurability::new(Some(1));
        marks.wait(4).await.unwrap();
        marks.synced(4);
        marks.state().written = 7;
        let waiting = tokio::spawn({
            let marks = marks.clone();
            async move { marks.wait(6).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "index 6 is written, not durable");
        marks.synced(7);
        waiting.await.unwrap().unwrap();
        // A flush that started at epoch 0 for index 9 ends after a cut at 5.
        let epoch = marks.state().epoch;
        marks.truncated(5);
        assert_ne!(marks.state().epoch, epoch);
        assert_eq!(marks.durable(), 5);
        assert_eq!(marks.state().written, 5);
        // Past the last written index, a wait is for what was written.
        marks.wait(50).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_flusher_raises_the_mark_over_every_unsynced_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = crate::wal::Wal::open(dir.path(), 1 << 16).unwrap();
        let marks = LogDurability::new(Some(1));
        marks.synced(2);
        // The writes come before the wait: a wait is only for what was written when it began.
        wal.append(1, [&b"one"[..], b"two"], true).unwrap();
        for last in 3..=9 {
            wal.append(last, [&b"unsynced"[..]], false).unwrap();
            marks.written_unsynced(last, &wal.syncer(), &FailStop::default());
        }
        let waiting = tokio::spawn({
            let marks = marks.clone();
            async move { marks.wait(9).await }
        });
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await;
        waited.expect("the flusher reached index 9").unwrap().unwrap();
        assert_eq!(marks.durable(), 9);
        assert!(!marks.state().flushing, "the flusher stops when nothing is left unsynced");
    }
}
