//! The resource types of the load, their keys under `/registry/<type>/<namespace>/<name>` as the
//! apiserver lays them out, their object sizes, and the objects the load knows of (what the
//! apiserver's watch cache knows: each object's key and the mod_revision it last saw).

use crate::keys::{random_bytes, Rng};
use bytes::Bytes;
use std::sync::{Mutex, MutexGuard};

/// One resource type: its path element after /registry/, its share (per mille) of the
/// `--objects` (events and node leases are counted apart), and the size range of its objects in
/// storage (protobuf, as the apiserver writes them: most 1–10 KiB).
#[derive(Debug, Clone, Copy)]
pub struct Resource {
    pub name: &'static str,
    pub share: u64,
    pub min_size: usize,
    pub max_size: usize,
}

const KIB: usize = 1024;

const fn resource(name: &'static str, share: u64, min_size: usize, max_size: usize) -> Resource {
    Resource { name, share, min_size, max_size }
}

/// The types that hold `--objects` between them. Pods dominate a cluster's objects and its
/// writes (status updates); configmaps and secrets spread over the whole 1–10 KiB range.
pub const RESOURCES: [Resource; 8] = [
    resource("pods", 400, 3 * KIB, 8 * KIB),
    resource("replicasets", 120, 2 * KIB, 5 * KIB),
    resource("configmaps", 100, KIB, 10 * KIB),
    resource("secrets", 100, KIB, 4 * KIB),
    resource("endpointslices", 80, KIB, 4 * KIB),
    resource("services", 70, KIB, 2 * KIB),
    resource("deployments", 70, 3 * KIB, 6 * KIB),
    resource("serviceaccounts", 60, KIB, 2 * KIB),
];

/// Events: created with a lease (the event TTL), never updated by this load.
pub const EVENTS: Resource = resource("events", 0, KIB, 2 * KIB);

/// Node heartbeats: /registry/leases/kube-node-lease/<node>, a few hundred bytes each.
pub const NODE_LEASES: Resource = resource("leases", 0, 300, 500);

pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Every type the load lists, counts and watches: the object types, events, node leases.
pub fn watched() -> impl Iterator<Item = Resource> {
    RESOURCES.into_iter().chain([EVENTS, NODE_LEASES])
}

/// `/registry/<type>/`, the prefix the apiserver lists, counts and watches a type under.
pub fn prefix(resource: &Resource) -> Bytes {
    Bytes::from(format!("/registry/{}/", resource.name))
}

pub fn key(resource: &Resource, namespace: &str, name: &str) -> Bytes {
    Bytes::from(format!("/registry/{}/{namespace}/{name}", resource.name))
}

/// Index `i` with probability `weights[i] / sum(weights)`.
pub fn by_weight(rng: &mut Rng, weights: &[u64]) -> usize {
    let mut at = rng.u64(..weights.iter().sum::<u64>());
    weights.iter().position(|&w| at.checked_sub(w).map(|left| at = left).is_none()).unwrap_or(0)
}

/// Object bodies: slices at random offsets of a 4 MiB random buffer, so no two bodies share
/// content (a compressing store gains nothing a real cluster's objects would not give it) and
/// making one costs no copy.
pub struct Bodies(Bytes);

impl Default for Bodies {
    fn default() -> Self {
        Self(Bytes::from(random_bytes(4 << 20)))
    }
}

impl Bodies {
    /// A body for `resource`, its size uniform in the type's range.
    pub fn body(&self, resource: &Resource, rng: &mut Rng) -> Bytes {
        let size = resource.min_size + rng.usize(..=resource.max_size - resource.min_size);
        let at = rng.usize(..self.0.len() - size);
        self.0.slice(at..at + size)
    }
}

/// An object as the load knows it: its key and the mod_revision of its last write (the compare
/// of its next one).
#[derive(Debug, Clone)]
pub struct Object {
    pub key: Bytes,
    pub mod_revision: i64,
}

/// The objects of every type in [`RESOURCES`] (in that order) that the load may update or
/// delete. An object being written is taken out, so no two writers race on it (the apiserver's
/// writers do race; their conflicts are retried the same way as here, but would make the
/// figures depend on luck).
pub struct Objects(Vec<Mutex<Vec<Object>>>);

impl Default for Objects {
    fn default() -> Self {
        Self(RESOURCES.iter().map(|_| Mutex::default()).collect())
    }
}

impl Objects {
    fn of(&self, t: usize) -> MutexGuard<'_, Vec<Object>> {
        self.0[t].lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn put(&self, t: usize, object: Object) {
        self.of(t).push(object);
    }

    /// Takes a random object of type `t` out, `None` when none is free.
    pub fn take(&self, t: usize, rng: &mut Rng) -> Option<Object> {
        let mut objects = self.of(t);
        (!objects.is_empty()).then(|| {
            let at = rng.usize(..objects.len());
            objects.swap_remove(at)
        })
    }

    /// A type by share (pods most often), as its index in [`RESOURCES`].
    pub fn pick(rng: &mut Rng) -> usize {
        by_weight(rng, &RESOURCES.map(|r| r.share))
    }

    /// Objects of every type together, free now.
    pub fn total(&self) -> usize {
        (0..self.0.len()).map(|t| self.of(t).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_all_objects() {
        assert_eq!(RESOURCES.iter().map(|r| r.share).sum::<u64>(), 1000);
        let mut rng = Rng::with_seed(7);
        let mut seen = [0u64; RESOURCES.len()];
        for _ in 0..10_000 {
            seen[Objects::pick(&mut rng)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
        assert!(seen[0] > 3_500 && seen[0] < 4_500, "pods {}", seen[0]);
        let mut verbs = [0u32; 3];
        for _ in 0..4000 {
            verbs[by_weight(&mut rng, &[0, 3, 1])] += 1;
        }
        assert!(verbs[0] == 0 && verbs[1] > 2700 && verbs[2] > 800, "{verbs:?}");
    }

    #[test]
    fn bodies_stay_in_range_and_differ() {
        let (bodies, mut rng, r) = (Bodies::default(), Rng::with_seed(1), RESOURCES[2]);
        let (a, b) = (bodies.body(&r, &mut rng), bodies.body(&r, &mut rng));
        for x in [&a, &b] {
            assert!(x.len() >= r.min_size && x.len() <= r.max_size, "{}", x.len());
        }
        assert_ne!(a, b);
        assert_eq!(&key(&r, "ns-1", "cm-1")[..], b"/registry/configmaps/ns-1/cm-1");
        assert_eq!(&prefix(&r)[..], b"/registry/configmaps/");
    }
}
