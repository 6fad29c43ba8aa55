//! Which leases exist and which keys each holds: what the writer needs to refuse a put with an
//! unknown lease and to delete a revoked lease's keys in one revision. Timing (TTLs running
//! out, keep-alives) is the lease actor's business, not the store's.

use std::collections::{BTreeSet, HashMap};

/// The longest TTL etcd grants, in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;
/// The shortest TTL etcd grants (1.5 × its default election timeout, rounded up), in seconds.
pub const MIN_LEASE_TTL: i64 = 2;

/// A lease's granted TTL and attached keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LeaseEntry {
    ttl: i64,
    keys: BTreeSet<Box<[u8]>>,
}

/// The leases and their keys.
#[derive(Debug, Default)]
pub struct LeaseIndex {
    leases: HashMap<i64, LeaseEntry>,
    key_lease: HashMap<Box<[u8]>, i64>,
    /// Bytes of the attached keys, kept as keys come and go so reporting costs nothing.
    key_bytes: usize,
}

impl LeaseIndex {
    /// Whether lease `id` exists.
    pub fn exists(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    /// Records a lease (granting or restoring it).
    pub fn grant(&mut self, id: i64, ttl: i64) {
        self.leases.entry(id).or_default().ttl = ttl;
    }

    /// Forgets a lease and returns its keys, sorted; `None` if it did not exist.
    pub fn revoke(&mut self, id: i64) -> Option<Vec<Box<[u8]>>> {
        let entry = self.leases.remove(&id)?;
        for key in &entry.keys {
            self.key_lease.remove(key);
            self.key_bytes -= key.len();
        }
        Some(entry.keys.into_iter().collect())
    }

    /// `key` now belongs to `lease` (0: to none), leaving whatever lease held it before.
    pub fn attach(&mut self, key: &[u8], lease: i64) {
        self.detach(key);
        if lease == 0 {
            return;
        }
        if let Some(entry) = self.leases.get_mut(&lease) {
            entry.keys.insert(key.into());
            self.key_lease.insert(key.into(), lease);
            self.key_bytes += key.len();
        }
    }

    /// Whether attaching `key` to `lease` would give the lease more keys than its revoke can
    /// delete: a revoke deletes them all in one revision, of at most `limit` changes.
    pub fn is_full_for(&self, key: &[u8], lease: i64, limit: usize) -> bool {
        self.leases.get(&lease).is_some_and(|e| e.keys.len() >= limit && !e.keys.contains(key))
    }

    /// Keys attached to `lease` (0 if it does not exist).
    pub fn key_count(&self, lease: i64) -> usize {
        self.leases.get(&lease).map_or(0, |e| e.keys.len())
    }

    /// `key` was deleted: it belongs to no lease now.
    pub fn detach(&mut self, key: &[u8]) {
        if let Some(old) = self.key_lease.remove(key) {
            self.key_bytes -= key.len();
            if let Some(entry) = self.leases.get_mut(&old) {
                entry.keys.remove(key);
            }
        }
    }

    /// The keys of lease `id`, sorted, if it exists.
    pub fn keys(&self, id: i64) -> Option<Vec<Box<[u8]>>> {
        self.leases.get(&id).map(|e| e.keys.iter().cloned().collect())
    }

    /// Every lease with its granted TTL.
    pub fn list(&self) -> Vec<(i64, i64)> {
        let mut all: Vec<(i64, i64)> = self.leases.iter().map(|(id, e)| (*id, e.ttl)).collect();
        all.sort_unstable();
        all
    }

    /// Leases held.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// True when no lease exists.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Approximate heap bytes: per lease its entry, per attached key the key twice (set and
    /// reverse map) plus map overhead.
    pub fn heap_bytes(&self) -> usize {
        self.leases.len() * 64 + 2 * self.key_bytes + self.key_lease.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_move_between_leases_and_leave_on_delete_or_revoke() {
        let mut idx = LeaseIndex::default();
        idx.grant(1, 10);
        idx.grant(2, 20);
        idx.attach(b"b", 1);
        idx.attach(b"a", 1);
        idx.attach(b"c", 2);
        assert_eq!(idx.keys(1), Some(vec![b"a".to_vec().into(), b"b".to_vec().into()]));
        idx.attach(b"a", 2);
        idx.attach(b"b", 0);
        assert_eq!(idx.keys(1), Some(vec![]));
        idx.detach(b"c");
        assert_eq!(idx.revoke(2), Some(vec![b"a".to_vec().into()]));
        assert_eq!(idx.revoke(2), None);
        idx.attach(b"x", 99);
        assert_eq!(idx.list(), vec![(1, 10)]);
    }
}
