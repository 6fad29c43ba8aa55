//! The writes: creates, updates and deletes of objects spread over the types by their share,
//! events created on the shared lease, and node leases renewed by each node every interval.

use super::leases::LeaseManager;
use super::resources::{
    by_weight, key, Bodies, Object, Objects, Resource, EVENTS, NODE_LEASES, NODE_LEASE_NAMESPACE, RESOURCES,
};
use super::store;
use crate::conn::{Conn, OpError};
use crate::keys::Rng;
use crate::runner::Worker;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub const VERBS: [&str; 4] = ["create", "update", "delete", "event"];
const CREATE: usize = 0;
const DELETE: usize = 2;
const EVENT: usize = 3;
/// The verbs' weights: updates (pods' status) dominate an apiserver's writes.
const MIX: [u64; 4] = [1, 6, 1, 2];
/// Namespaces the new objects spread over.
const NAMESPACES: u64 = 100;

/// Names the objects a run creates: unique per run, so that a rerun on the same store adds
/// objects rather than collide with the last run's.
pub struct Namer {
    run: u32,
    next: AtomicU64,
}

impl Default for Namer {
    fn default() -> Self {
        Self { run: fastrand::u32(..), next: AtomicU64::new(0) }
    }
}

impl Namer {
    pub fn next(&self, resource: &Resource) -> bytes::Bytes {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let singular = resource.name.trim_end_matches('s');
        key(resource, &format!("ns-{:04}", n % NAMESPACES), &format!("{singular}-{:08x}-{n:09}", self.run))
    }
}

/// What the writers share: the objects that may be updated or deleted, the bodies to write, the
/// new objects' names, the events' lease, and the conflicts updates and deletes retried.
pub struct Shared {
    pub objects: Objects,
    pub bodies: Bodies,
    pub namer: Namer,
    pub leases: LeaseManager,
    pub conflicts: AtomicU64,
}

pub struct Writer {
    pub kv: KvClient<Conn>,
    pub rng: Rng,
    pub shared: Arc<Shared>,
}

impl Writer {
    async fn create(&mut self) -> Result<(), OpError> {
        let t = Objects::pick(&mut self.rng);
        let key = self.shared.namer.next(&RESOURCES[t]);
        let value = self.shared.bodies.body(&RESOURCES[t], &mut self.rng);
        let mod_revision = store::create(&mut self.kv, key.clone(), value, 0).await?;
        self.shared.objects.put(t, Object { key, mod_revision });
        Ok(())
    }

    /// An update (`delete` false) or a delete of a random object.
    async fn write(&mut self, delete: bool) -> Result<(), OpError> {
        let t = Objects::pick(&mut self.rng);
        let Some(mut object) = self.shared.objects.take(t, &mut self.rng) else {
            // Every object of the type is being written or gone: a create keeps the mix going.
            return if delete {
                Err(OpError::new("delete: no object left to delete"))
            } else {
                self.create().await
            };
        };
        let result = if delete {
            store::delete(&mut self.kv, &object.key, object.mod_revision).await
        } else {
            let value = self.shared.bodies.body(&RESOURCES[t], &mut self.rng);
            store::update(&mut self.kv, &object.key, object.mod_revision, value).await
        };
        if let Ok(w) = &result {
            object.mod_revision = w.revision;
            self.shared.conflicts.fetch_add(w.conflicts as u64, Ordering::Relaxed);
        }
        // A failed write leaves the object as it was known (the next writer's compare tells);
        // a deleted one is gone.
        if !(delete && result.is_ok()) {
            self.shared.objects.put(t, object);
        }
        result.map(|_| ())
    }

    async fn event(&mut self) -> Result<(), OpError> {
        let lease = self.shared.leases.get().await?;
        let key = self.shared.namer.next(&EVENTS);
        let value = self.shared.bodies.body(&EVENTS, &mut self.rng);
        store::create(&mut self.kv, key, value, lease).await.map(|_| ())
    }
}

impl Worker for Writer {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let verb = by_weight(&mut self.rng, &MIX);
        (verb, async move {
            match verb {
                CREATE => self.create().await,
                DELETE => self.write(true).await,
                EVENT => self.event().await,
                _ => self.write(false).await, // an update
            }
        })
    }
}

/// Creates objects until the store holds the target: one create per request number, the type
/// by share.
pub struct Seeder(pub Writer);

impl Worker for Seeder {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, self.0.create())
    }
}

/// The node leases: node `n`'s key and the mod_revision of its last renewal.
pub struct Nodes(pub Mutex<Vec<Object>>);

impl Nodes {
    pub fn key(n: usize) -> bytes::Bytes {
        key(&NODE_LEASES, NODE_LEASE_NAMESPACE, &format!("node-{n:05}"))
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, Vec<Object>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self) -> usize {
        self.leases().len()
    }
}

/// A client renewing node leases: request `i` renews node `i mod nodes` (the kubelet's
/// GuaranteedUpdate of its Lease, every 10 s).
pub struct Renewer {
    pub kv: KvClient<Conn>,
    pub rng: Rng,
    pub nodes: Arc<Nodes>,
    pub shared: Arc<Shared>,
}

impl Worker for Renewer {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, async move {
            let n = (i % self.nodes.count().max(1) as u64) as usize;
            let Some(lease) = self.nodes.leases().get(n).cloned() else {
                return Err(OpError::new("no node leases"));
            };
            let value = self.shared.bodies.body(&NODE_LEASES, &mut self.rng);
            let w = store::update(&mut self.kv, &lease.key, lease.mod_revision, value).await?;
            if let Some(o) = self.nodes.leases().get_mut(n) {
                o.mod_revision = w.revision;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_namespaced() {
        let namer = Namer::default();
        let (a, b) = (namer.next(&RESOURCES[0]), namer.next(&RESOURCES[0]));
        assert_ne!(a, b);
        assert!(String::from_utf8_lossy(&a).starts_with("/registry/pods/ns-0000/pod-"), "{a:?}");
        assert!(String::from_utf8_lossy(&b).starts_with("/registry/pods/ns-0001/pod-"));
        assert_eq!(&Nodes::key(7)[..], b"/registry/leases/kube-node-lease/node-00007");
    }
}
