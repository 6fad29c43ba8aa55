//! Lease deadlines. A keep-alive pushes a deadline out; expired leases come off a min-heap in
//! deadline order. Superseded heap entries are skipped when they surface (lazy deletion), so a
//! renewal costs O(log n) and no timer per lease exists.
//!
//! Every member's lessor knows every lease (from apply), but only the leader's is *primary*:
//! it alone keeps deadlines, renews and expires, as etcd's lessor does.
//!
//! ```text
//!   follower ──promote(now)──► primary: every lease's deadline = now + its TTL (etcd's
//!      ▲                                 extension on a new leader: never an early expiry)
//!      └─────────demote()────── primary: deadlines dropped, nothing expires here
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Deadline {
    ttl: i64,
    expires: Instant,
    /// A revoke for it is on its way to the store.
    revoking: bool,
}

/// Deadlines of every live lease.
#[derive(Debug, Default)]
pub struct Lessor {
    leases: HashMap<i64, Deadline>,
    heap: BinaryHeap<Reverse<(Instant, i64)>>,
    primary: bool,
}

fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

impl Lessor {
    /// A primary lessor (a member alone leads from the start).
    pub fn primary() -> Self {
        Self { primary: true, ..Self::default() }
    }

    /// Whether this lessor keeps deadlines (its member leads).
    pub fn is_primary(&self) -> bool {
        self.primary
    }

    /// Starts (or restarts) lease `id` with `ttl` seconds from `now`. After a restart every
    /// lease gets its full TTL again, as etcd does without checkpoints.
    pub fn track(&mut self, id: i64, ttl: i64, now: Instant) {
        let expires = now + seconds(ttl);
        self.leases.insert(id, Deadline { ttl, expires, revoking: false });
        if self.primary {
            self.heap.push(Reverse((expires, id)));
        }
    }

    /// This member leads: every lease's full TTL from `now`.
    pub fn promote(&mut self, now: Instant) {
        self.primary = true;
        self.heap.clear();
        for (id, lease) in &mut self.leases {
            lease.expires = now + seconds(lease.ttl);
            lease.revoking = false;
            self.heap.push(Reverse((lease.expires, *id)));
        }
    }

    /// This member no longer leads: nothing expires here until it leads again.
    pub fn demote(&mut self) {
        self.primary = false;
        self.heap = BinaryHeap::new();
    }

    /// Replaces every lease with `leases` ((id, ttl)), each from `now`: a snapshot replaced them.
    pub fn reset(&mut self, leases: Vec<(i64, i64)>, now: Instant) {
        self.leases = HashMap::with_capacity(leases.len());
        self.heap = BinaryHeap::new();
        for (id, ttl) in leases {
            self.track(id, ttl, now);
        }
    }

    /// A keep-alive: the lease's full TTL again, or `None` if it is unknown or already expired
    /// (etcd answers TTL 0 then).
    pub fn renew(&mut self, id: i64, now: Instant) -> Option<i64> {
        let lease = self.leases.get_mut(&id)?;
        if !self.primary {
            return None;
        }
        if lease.revoking || lease.expires <= now {
            return None;
        }
        lease.expires = now + seconds(lease.ttl);
        self.heap.push(Reverse((lease.expires, id)));
        Some(lease.ttl)
    }

    /// (remaining seconds, granted TTL) of a live lease.
    pub fn remaining(&self, id: i64, now: Instant) -> Option<(i64, i64)> {
        let lease = self.leases.get(&id)?;
        let left = lease.expires.saturating_duration_since(now);
        // etcd truncates the remaining time to whole seconds (`int64(Remaining().Seconds())`):
        // a 60 s lease asked a moment after its grant has 59 left.
        let secs = left.as_secs() as i64;
        Some((secs, lease.ttl))
    }

    /// The lease was revoked: forget it.
    pub fn forget(&mut self, id: i64) {
        self.leases.remove(&id);
    }

    /// A revoke failed: the lease expires again on the next pass.
    pub fn retry(&mut self, id: i64) {
        if !self.primary {
            return;
        }
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.revoking = false;
            self.heap.push(Reverse((lease.expires, id)));
        }
    }

    /// Up to `max` leases whose deadline passed, marked as being revoked.
    pub fn expired(&mut self, now: Instant, max: usize) -> Vec<i64> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(Reverse((at, id))) = self.heap.peek().copied() else { break };
            if at > now {
                break;
            }
            self.heap.pop();
            let Some(lease) = self.leases.get_mut(&id) else { continue };
            // A superseded entry (renewed since) or one already on its way out.
            if lease.expires != at || lease.revoking {
                continue;
            }
            lease.revoking = true;
            out.push(id);
        }
        out
    }

    /// Live leases.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// True when no lease is tracked.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Approximate heap bytes: the map and the heap (with its superseded entries).
    pub fn heap_bytes(&self) -> usize {
        self.leases.capacity() * (std::mem::size_of::<(i64, Deadline)>() + 8)
            + self.heap.capacity() * std::mem::size_of::<Reverse<(Instant, i64)>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_push_deadlines_and_expiry_comes_in_order_at_a_bounded_rate() {
        let t0 = Instant::now();
        let mut l = Lessor::primary();
        l.reset(vec![(1, 10), (2, 5), (3, 5)], t0);
        assert_eq!(l.renew(2, t0 + seconds(4)), Some(5));
        assert_eq!(l.remaining(2, t0 + seconds(4)), Some((5, 5)));
        let a_moment_later = t0 + seconds(4) + Duration::from_millis(1);
        assert_eq!(l.remaining(2, a_moment_later), Some((4, 5)), "truncated, as etcd's");
        assert_eq!(l.expired(t0 + seconds(6), 10), vec![3]);
        assert_eq!(l.renew(3, t0 + seconds(6)), None, "an expiring lease cannot be renewed");
        assert_eq!(l.expired(t0 + seconds(11), 1), vec![2], "at most `max` per pass");
        assert_eq!(l.expired(t0 + seconds(11), 10), vec![1]);
        l.retry(1);
        assert_eq!(l.expired(t0 + seconds(11), 10), vec![1]);
        l.forget(1);
        assert_eq!(l.renew(1, t0), None);
        assert_eq!(l.remaining(9, t0), None);
    }

    #[test]
    fn only_a_primary_expires_and_a_promotion_gives_every_lease_its_full_ttl() {
        let t0 = Instant::now();
        let mut l = Lessor::default();
        l.reset(vec![(1, 5), (2, 60)], t0);
        assert_eq!(l.expired(t0 + seconds(100), 10), Vec::<i64>::new(), "a follower expires nothing");
        assert_eq!(l.renew(1, t0), None, "nor renews");
        l.promote(t0 + seconds(4));
        assert_eq!(l.remaining(1, t0 + seconds(4)), Some((5, 5)), "the TTL counts from the promotion");
        assert_eq!(l.expired(t0 + seconds(8), 10), Vec::<i64>::new());
        assert_eq!(l.expired(t0 + seconds(9), 10), vec![1]);
        l.demote();
        assert_eq!(l.expired(t0 + seconds(100), 10), Vec::<i64>::new(), "demoted, nothing expires");
        l.reset(vec![(3, 7)], t0);
        assert_eq!((l.len(), l.remaining(2, t0)), (1, None), "a reset replaces every lease");
        l.promote(t0);
        assert_eq!(l.expired(t0 + seconds(7), 10), vec![3]);
    }
}
