//! When the store compacts by itself: etcd 3.4's `--auto-compaction-mode` and
//! `--auto-compaction-retention` (its `v3compactor`), as plain schedules that are told the time
//! and the revision and answer with the revision to compact to. The caller (the cluster's
//! `auto_compaction` task) ticks them, asks only while this member leads, and sends the
//! compaction through the log as a client's would go.
//!
//! Periodic, retention R (a Go duration, or whole hours):
//!
//! ```text
//!  every  = min(R, 1 h)          the time between compactions once the first is done
//!  sample = every / 10           the revision is sampled this often (and a failure retried)
//!  keep   = R / sample + 1       samples kept: the oldest is the revision of R ago
//!
//!  R = 10 s: samples at 0, 1, 2, ... s; nothing until 10 s have passed since the start, then
//!            compact to the revision sampled at 0 s; every 10 s from then on, to the oldest
//!            of the 11 samples before (at 20 s, the one of 9 s): etcd's order, sample then
//!            wait then compact, keeps one sample more than the retention.
//! ```
//!
//! Revision, retention N: every 5 minutes, compact to the current revision less N, unless
//! that is not past 0 or is where the last compaction went.
//!
//! A compaction that answers "required revision has been compacted" counts as done (a client
//! compacted further); any other failure is retried at the next sample (periodic) or the next
//! 5 minutes (revision). Where etcd pauses its compactor while a member follows, these return
//! nothing while `leads` is false; periodic samples still go on, as etcd's do.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the flags ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Retention 0: no compaction but the clients'.
    Off,
    /// Keep the revisions of this long ago and after.
    Periodic(Duration),
    /// Keep this many revisions before the current one.
    Revision(i64),
}

/// Why the flags do not make an [`AutoCompaction`], in etcd's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    /// `--auto-compaction-mode` is neither `periodic` nor `revision`.
    #[error("unknown auto-compaction-mode {0:?}")]
    Mode(String),
    /// `--auto-compaction-retention` is neither a count nor a Go duration.
    #[error("error parsing CompactionRetention: {0}")]
    Retention(String),
}

impl AutoCompaction {
    /// Reads the two flags as etcd 3.4 does: a retention that is a whole number is hours
    /// (periodic) or revisions (revision); any other is a Go duration, whose nanoseconds a
    /// revision mode takes as a count (etcd's own reading); 0 is off in either mode.
    pub fn from_flags(
        mode: &str,
        retention: &str,
        parse_duration: impl Fn(&str) -> Result<Duration, String>,
    ) -> Result<Self, Invalid> {
        let periodic = match mode {
            "periodic" => true,
            "revision" => false,
            other => return Err(Invalid::Mode(other.to_owned())),
        };
        let parsed = match retention.parse::<i64>() {
            Ok(n) if n >= 0 => {
                if periodic {
                    Duration::from_secs(3600).saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
                } else {
                    return Ok(if n == 0 { Self::Off } else { Self::Revision(n) });
                }
            }
            _ => parse_duration(retention).map_err(Invalid::Retention)?,
        };
        Ok(match (parsed.is_zero(), periodic) {
            (true, _) => Self::Off,
            (false, true) => Self::Periodic(parsed),
            (false, false) => Self::Revision(i64::try_from(parsed.as_nanos()).unwrap_or(i64::MAX)),
        })
    }
}

/// The periodic schedule.
#[derive(Debug)]
pub struct Periodic {
    retention: Duration,
    /// Samples, oldest first, at most `keep`.
    revisions: VecDeque<i64>,
    keep: usize,
    last_done: Instant,
    /// The retention until the first try, then `every`.
    wait: Duration,
}

/// How often a periodic schedule compacts once it has begun: etcd's one hour at most.
fn every(retention: Duration) -> Duration {
    retention.min(Duration::from_secs(3600))
}

impl Periodic {
    /// A schedule started at `now`, when the store was at `revision`.
    pub fn new(retention: Duration, now: Instant, revision: i64) -> Self {
        let sample = every(retention) / 10;
        let keep = usize::try_from(retention.as_nanos() / sample.as_nanos().max(1)).unwrap_or(usize::MAX) + 1;
        let mut revisions = VecDeque::with_capacity(keep.min(64));
        revisions.push_back(revision);
        Self { retention, revisions, keep, last_done: now, wait: retention }
    }

    /// How often [`Self::tick`] is to be called.
    pub fn sample_interval(&self) -> Duration {
        every(self.retention) / 10
    }

    /// A sample's tick, at `now` with the store at `revision`: the revision to compact to now,
    /// if any. The caller reports how the compaction went with [`Self::done`].
    pub fn tick(&mut self, now: Instant, revision: i64, leads: bool) -> Option<i64> {
        let due = leads && now.duration_since(self.last_done) >= self.wait;
        let target = due.then(|| {
            self.wait = every(self.retention);
            self.revisions.front().copied().unwrap_or(revision)
        });
        self.revisions.push_back(revision);
        if self.revisions.len() > self.keep {
            self.revisions.pop_front();
        }
        target
    }

    /// The compaction [`Self::tick`] asked for is done, or a client's went further.
    pub fn done(&mut self, now: Instant) {
        self.last_done = now;
    }
}

/// etcd's fixed time between a revision schedule's compactions.
pub const REVISION_INTERVAL: Duration = Duration::from_secs(300);

/// The revision schedule, ticked every [`REVISION_INTERVAL`].
#[derive(Debug)]
pub struct Revision {
    retention: i64,
    last: i64,
}

impl Revision {
    /// A schedule that keeps `retention` revisions.
    pub fn new(retention: i64) -> Self {
        Self { retention, last: 0 }
    }

    /// The revision to compact to with the store at `revision`, if any.
    pub fn tick(&self, revision: i64, leads: bool) -> Option<i64> {
        let target = revision - self.retention;
        (leads && target > 0 && target != self.last).then_some(target)
    }

    /// The compaction to `target` is done, or a client's went further.
    pub fn done(&mut self, target: i64) {
        self.last = target;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(text: &str) -> Result<Duration, String> {
        match text {
            "90m" => Ok(Duration::from_secs(5400)),
            "10s" => Ok(Duration::from_secs(10)),
            "0s" => Ok(Duration::ZERO),
            other => Err(format!("time: invalid duration {other:?}")),
        }
    }

    #[test]
    fn flags_read_as_etcd_reads_them() {
        let read = |mode, retention| AutoCompaction::from_flags(mode, retention, go);
        assert_eq!(read("periodic", "0"), Ok(AutoCompaction::Off));
        assert_eq!(read("periodic", "0s"), Ok(AutoCompaction::Off));
        assert_eq!(read("periodic", "2"), Ok(AutoCompaction::Periodic(Duration::from_secs(7200))));
        assert_eq!(read("periodic", "90m"), Ok(AutoCompaction::Periodic(Duration::from_secs(5400))));
        assert_eq!(read("revision", "1000"), Ok(AutoCompaction::Revision(1000)));
        assert_eq!(read("revision", "10s"), Ok(AutoCompaction::Revision(10_000_000_000)));
        assert_eq!(read("revision", "0"), Ok(AutoCompaction::Off));
        assert_eq!(read("daily", "1"), Err(Invalid::Mode("daily".into())));
        assert_eq!(read("daily", "0"), Err(Invalid::Mode("daily".into())), "the mode is checked at 0 too");
        let negative = read("periodic", "-1").unwrap_err();
        assert_eq!(negative.to_string(), "error parsing CompactionRetention: time: invalid duration \"-1\"");
    }

    /// etcd's worked example at 10 s: nothing for the first 10 s, then every 10 s to the
    /// revision of 10 s before.
    #[test]
    fn periodic_waits_one_retention_then_compacts_to_the_revision_of_one_retention_ago() {
        let start = Instant::now();
        let mut schedule = Periodic::new(Duration::from_secs(10), start, 1);
        assert_eq!(schedule.sample_interval(), Duration::from_secs(1));
        let mut compacted = Vec::new();
        // One put a second: the revision at second s is s + 1.
        for s in 1..=35u64 {
            let now = start + Duration::from_secs(s);
            if let Some(target) = schedule.tick(now, s as i64 + 1, true) {
                compacted.push((s, target));
                schedule.done(now);
            }
        }
        assert_eq!(compacted, [(10, 1), (20, 10), (30, 20)]);
    }

    /// Hours: a sample every 6 minutes, compactions every hour once the retention has passed,
    /// each to the sample of 2 h 6 min before.
    #[test]
    fn periodic_over_an_hour_compacts_hourly_and_keeps_the_whole_retention() {
        let start = Instant::now();
        let mut schedule = Periodic::new(Duration::from_secs(2 * 3600), start, 0);
        assert_eq!(schedule.sample_interval(), Duration::from_secs(360));
        let mut compacted = Vec::new();
        for tick in 1..=40u64 {
            let now = start + Duration::from_secs(360 * tick);
            // The revision is the minute.
            if let Some(target) = schedule.tick(now, (6 * tick) as i64, true) {
                compacted.push((tick * 6, target));
                schedule.done(now);
            }
        }
        assert_eq!(compacted, [(120, 0), (180, 54), (240, 114)]);
    }

    /// A follower compacts nothing, a failure is retried at the next sample, and a leader that
    /// takes over compacts at once if the last compaction is a retention old.
    #[test]
    fn periodic_pauses_while_following_and_retries_a_failure_at_the_next_sample() {
        let start = Instant::now();
        let mut schedule = Periodic::new(Duration::from_secs(10), start, 1);
        for s in 1..=12u64 {
            assert_eq!(schedule.tick(start + Duration::from_secs(s), s as i64 + 1, false), None);
        }
        // Leads from 13 s on; the first try fails.
        assert_eq!(schedule.tick(start + Duration::from_secs(13), 14, true), Some(3));
        let retried = schedule.tick(start + Duration::from_secs(14), 15, true);
        assert_eq!(retried, Some(4), "retried a sample later, to the sample of then");
        schedule.done(start + Duration::from_secs(14));
        assert_eq!(schedule.tick(start + Duration::from_secs(15), 16, true), None);
    }

    #[test]
    fn revision_keeps_the_last_n_and_skips_what_it_did() {
        let mut schedule = Revision::new(100);
        assert_eq!(schedule.tick(100, true), None, "nothing before revision 1");
        assert_eq!(schedule.tick(150, false), None, "a follower compacts nothing");
        assert_eq!(schedule.tick(150, true), Some(50));
        schedule.done(50);
        assert_eq!(schedule.tick(150, true), None, "no write since: nothing new to compact");
        assert_eq!(schedule.tick(400, true), Some(300));
    }
}
