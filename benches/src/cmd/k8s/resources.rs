//! The resource types of the load, their keys under `/registry/<type>/<namespace>/<name>` as the
//! apiserver lays them out, their object sizes, and the objects the load knows of (what the
//! apiserver's watch cache knows: each object's key and the mod_revision it last saw).

use crate::keys::{random_bytes, Rng};
use bytes::Bytes;
use std::sync::Mutex;

/// One resource type: its path under /registry, its share of the objects and the size range of
/// its objects in storage (protobuf, as the apiserver writes them: most 1–10 KiB).
#[derive(Debug, Clone, Copy)]
pub struct Resource {
    /// The path element after /registry/.
    pub name: &'static str,
    /// Per mille of the `--objects` (events and node leases are counted apart).
    pub share: u64,
    /// Smallest object, bytes.
    pub min_size: usize,
    /// Largest object, bytes.
    pub max_size: usize,
}

const KIB: usize = 1024;

/// The types that hold `--objects` between them. Pods dominate a cluster's objects and its
/// writes (status updates); configmaps and secrets spread over the whole 1–10 KiB range.
pub const RESOURCES: [Resource; 8] = [
    Resource { name: "pods", share: 400, min_size: 3 * KIB, max_size: 8 * KIB },
    Resource { name: "replicasets", share: 120, min_size: 2 * KIB, max_size: 5 * KIB },
    Resource { name: "configmaps", share: 100, min_size: KIB, max_size: 10 * KIB },
    Resource { name: "secrets", share: 100, min_size: KIB, max_size: 4 * KIB },
    Resource { name: "endpointslices", share: 80, min_size: KIB, max_size: 4 * KIB },
    Resource { name: "services", share: 70, min_size: KIB, max_size: 2 * KIB },
    Resource { name: "deployments", share: 70, min_size: 3 * KIB, max_size: 6 * KIB },
    Resource { name: "serviceaccounts", share: 60, min_size: KIB, max_size: 2 * KIB },
];

/// Events: created with a lease (the event TTL), never updated by this load.
pub const EVENTS: Resource = Resource { name: "events", share: 0, min_size: KIB, max_size: 2 * KIB };

/// Node heartbeats: /registry/leases/kube-node-lease/<node>, a few hundred bytes each.
pub const NODE_LEASES: Resource = Resource { name: "leases", share: 0, min_size: 300, max_size: 500 };

/// The namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Every type the load lists, counts and watches: the object types, events, node leases.
pub fn watched() -> impl Iterator<Item = Resource> {
    RESOURCES.into_iter().chain([EVENTS, NODE_LEASES])
}

/// `/registry/<type>/`, the prefix the apiserver lists, counts and watches a type under.
pub fn prefix(resource: &Resource) -> Bytes {
    Bytes::from(format!("/registry/{}/", resource.name))
}

/// The key of object `name` of `resource` in `namespace`.
pub fn key(resource: &Resource, namespace: &str, name: &str) -> Bytes {
    Bytes::from(format!("/registry/{}/{namespace}/{name}", resource.name))
}

/// Object bodies: slices at random offsets of a 4 MiB random buffer, so no two bodies share
/// content (a compressing store gains nothing a real cluster's objects would not give it) and
/// making one costs no copy.
pub struct Bodies(Bytes);

/// Bytes of random data the bodies are cut from.
const BODY_POOL: usize = 4 << 20;

impl Bodies {
    /// A fresh random buffer.
    pub fn new() -> Self {
        Self(Bytes::from(random_bytes(BODY_POOL)))
    }

    /// A body for `resource`, its size uniform in the type's range.
    pub fn body(&self, resource: &Resource, rng: &mut Rng) -> Bytes {
        let span = (resource.max_size - resource.min_size) as u64 + 1;
        let size = resource.min_size + rng.u64(..span) as usize;
        let at = rng.u64(..(self.0.len() - size) as u64) as usize;
        self.0.slice(at..at + size)
    }
}

impl Default for Bodies {
    fn default() -> Self {
        Self::new()
    }
}

/// An object as the load knows it: its key and the mod_revision of its last write.
#[derive(Debug, Clone)]
pub struct Object {
    /// The key.
    pub key: Bytes,
    /// The mod_revision the object was last seen at (the compare of its next write).
    pub mod_revision: i64,
}

/// The objects of one type that the load may update or delete. An object being written is
/// taken out, so no two writers race on it (the apiserver's writers do race; their conflicts
/// are retried the same way as here, but would make the figures depend on luck).
#[derive(Default)]
pub struct Pool(Mutex<Vec<Object>>);

impl Pool {
    fn objects(&self) -> std::sync::MutexGuard<'_, Vec<Object>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds an object.
    pub fn put(&self, object: Object) {
        self.objects().push(object);
    }

    /// Takes a random object out, `None` when none is free.
    pub fn take(&self, rng: &mut Rng) -> Option<Object> {
        let mut objects = self.objects();
        if objects.is_empty() {
            return None;
        }
        let at = rng.u64(..objects.len() as u64) as usize;
        Some(objects.swap_remove(at))
    }

    /// Objects free now.
    pub fn len(&self) -> usize {
        self.objects().len()
    }

    /// Whether no object is free.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The objects of every type in [`RESOURCES`], in that order.
pub struct Objects {
    /// One pool per type.
    pub pools: Vec<Pool>,
}

impl Objects {
    /// No objects yet.
    pub fn new() -> Self {
        Self { pools: RESOURCES.iter().map(|_| Pool::default()).collect() }
    }

    /// A type by share (pods most often), as its index in [`RESOURCES`].
    pub fn pick(rng: &mut Rng) -> usize {
        let mut at = rng.u64(..1000);
        for (i, r) in RESOURCES.iter().enumerate() {
            if at < r.share {
                return i;
            }
            at -= r.share;
        }
        0
    }

    /// Objects of every type together.
    pub fn total(&self) -> usize {
        self.pools.iter().map(Pool::len).sum()
    }
}

impl Default for Objects {
    fn default() -> Self {
        Self::new()
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
    }

    #[test]
    fn bodies_stay_in_range_and_differ() {
        let bodies = Bodies::new();
        let mut rng = Rng::with_seed(1);
        let r = RESOURCES[2];
        let a = bodies.body(&r, &mut rng);
        let b = bodies.body(&r, &mut rng);
        for x in [&a, &b] {
            assert!(x.len() >= r.min_size && x.len() <= r.max_size, "{}", x.len());
        }
        assert_ne!(a, b);
        assert_eq!(&key(&r, "ns-1", "cm-1")[..], b"/registry/configmaps/ns-1/cm-1");
        assert_eq!(&prefix(&r)[..], b"/registry/configmaps/");
    }
}
