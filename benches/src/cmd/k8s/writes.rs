//! The writes: creates, updates and deletes of objects spread over the types by their share,
//! events created on the shared lease, and node leases renewed by each node every interval.

use super::leases::LeaseManager;
use super::resources::{
    key, Bodies, Object, Objects, Resource, EVENTS, NODE_LEASES, NODE_LEASE_NAMESPACE, RESOURCES,
};
use super::store;
use crate::conn::Conn;
use crate::keys::Rng;
use crate::runner::{OpError, Worker};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The write verbs, in the order of their reports.
pub const VERBS: [&str; 4] = ["create", "update", "delete", "event"];
const CREATE: usize = 0;
const UPDATE: usize = 1;
const DELETE: usize = 2;
const EVENT: usize = 3;

/// How the writes split over the verbs (weights), from `--write-mix create,update,delete,event`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix(pub [u32; 4]);

impl Mix {
    /// Parses four weights, one at least above 0.
    pub fn parse(text: &str) -> Result<Self, String> {
        let weights: Vec<u32> = text
            .split(',')
            .map(|w| w.trim().parse::<u32>().map_err(|e| format!("--write-mix {text:?}: {e}")))
            .collect::<Result<_, _>>()?;
        let weights: [u32; 4] = weights.try_into().map_err(|_| {
            format!("--write-mix needs four weights (create,update,delete,event), got {text:?}")
        })?;
        if weights.iter().all(|&w| w == 0) {
            return Err("--write-mix: every weight is 0".to_string());
        }
        Ok(Self(weights))
    }

    fn pick(&self, rng: &mut Rng) -> usize {
        let mut at = rng.u64(..self.0.iter().map(|&w| w as u64).sum::<u64>());
        for (verb, &w) in self.0.iter().enumerate() {
            if at < w as u64 {
                return verb;
            }
            at -= w as u64;
        }
        UPDATE
    }
}

/// Names the objects a run creates: unique per run, so that a rerun on the same store adds
/// objects rather than collide with the last run's.
#[derive(Clone)]
pub struct Namer {
    run: u32,
    next: Arc<AtomicU64>,
    namespaces: u64,
}

impl Namer {
    /// Names spread over `namespaces` namespaces.
    pub fn new(namespaces: u64) -> Self {
        Self { run: fastrand::u32(..), next: Arc::new(AtomicU64::new(0)), namespaces }
    }

    /// The next object's key for `resource`.
    pub fn next(&self, resource: &Resource) -> bytes::Bytes {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let namespace = format!("ns-{:04}", n % self.namespaces);
        let singular = resource.name.trim_end_matches('s');
        key(resource, &namespace, &format!("{singular}-{:08x}-{n:09}", self.run))
    }
}

/// What the writers share.
pub struct Shared {
    /// The objects that may be updated or deleted.
    pub objects: Objects,
    /// Bodies to write.
    pub bodies: Bodies,
    /// New objects' names.
    pub namer: Namer,
    /// The events' lease.
    pub leases: LeaseManager,
    /// Conflicts retried by updates and deletes.
    pub conflicts: AtomicU64,
}

/// One client of the write mix.
pub struct Writer {
    /// The client's KV.
    pub kv: KvClient<Conn>,
    /// Its random numbers.
    pub rng: Rng,
    /// The mix.
    pub mix: Mix,
    /// The state the writers share.
    pub shared: Arc<Shared>,
}

impl Writer {
    async fn create(&mut self) -> Result<(), OpError> {
        let t = Objects::pick(&mut self.rng);
        let resource = RESOURCES[t];
        let key = self.shared.namer.next(&resource);
        let value = self.shared.bodies.body(&resource, &mut self.rng);
        let mod_revision = store::create(&mut self.kv, key.clone(), value, 0).await?;
        self.shared.objects.pools[t].put(Object { key, mod_revision });
        Ok(())
    }

    async fn update(&mut self) -> Result<(), OpError> {
        let t = Objects::pick(&mut self.rng);
        let Some(mut object) = self.shared.objects.pools[t].take(&mut self.rng) else {
            // Every object of the type is being written or gone: a create keeps the mix going.
            return self.create().await;
        };
        let value = self.shared.bodies.body(&RESOURCES[t], &mut self.rng);
        let result = store::update(&mut self.kv, &object.key, object.mod_revision, value).await;
        if let Ok(w) = &result {
            object.mod_revision = w.revision;
            self.shared.conflicts.fetch_add(w.conflicts as u64, Ordering::Relaxed);
        }
        // A failed update leaves the object as it was known: the next writer's compare tells.
        self.shared.objects.pools[t].put(object);
        result.map(|_| ())
    }

    async fn delete(&mut self) -> Result<(), OpError> {
        let t = Objects::pick(&mut self.rng);
        let Some(object) = self.shared.objects.pools[t].take(&mut self.rng) else {
            return Err(OpError::new("delete: no object left to delete"));
        };
        let result = store::delete(&mut self.kv, &object.key, object.mod_revision).await;
        match &result {
            Ok(w) => {
                self.shared.conflicts.fetch_add(w.conflicts as u64, Ordering::Relaxed);
            }
            // Not deleted: still there to be written.
            Err(_) => self.shared.objects.pools[t].put(object),
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
        let verb = self.mix.pick(&mut self.rng);
        (verb, async move {
            match verb {
                CREATE => self.create().await,
                DELETE => self.delete().await,
                EVENT => self.event().await,
                _ => self.update().await,
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
pub struct Nodes {
    /// One per node.
    pub leases: Mutex<Vec<Object>>,
}

impl Nodes {
    /// The key of node `n`'s lease.
    pub fn key(n: usize) -> bytes::Bytes {
        key(&NODE_LEASES, NODE_LEASE_NAMESPACE, &format!("node-{n:05}"))
    }

    fn get(&self, n: usize) -> Option<Object> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).get(n).cloned()
    }

    fn set(&self, n: usize, mod_revision: i64) {
        if let Some(o) = self.leases.lock().unwrap_or_else(|p| p.into_inner()).get_mut(n) {
            o.mod_revision = mod_revision;
        }
    }

    /// Nodes known.
    pub fn len(&self) -> usize {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether there is no node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A client renewing node leases: request `i` renews node `i mod nodes` (the kubelet's
/// GuaranteedUpdate of its Lease, every 10 s).
pub struct Renewer {
    /// The client's KV.
    pub kv: KvClient<Conn>,
    /// Its random numbers.
    pub rng: Rng,
    /// The nodes.
    pub nodes: Arc<Nodes>,
    /// The bodies (and the rest the writers share).
    pub shared: Arc<Shared>,
}

impl Worker for Renewer {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, async move {
            let n = (i % self.nodes.len().max(1) as u64) as usize;
            let Some(lease) = self.nodes.get(n) else { return Err(OpError::new("no node leases")) };
            let value = self.shared.bodies.body(&NODE_LEASES, &mut self.rng);
            let w = store::update(&mut self.kv, &lease.key, lease.mod_revision, value).await?;
            self.nodes.set(n, w.revision);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_parses_and_picks_by_weight() {
        assert!(Mix::parse("1,2,3").is_err());
        assert!(Mix::parse("0,0,0,0").is_err());
        assert!(Mix::parse("1,x,1,1").is_err());
        let mix = Mix::parse("0, 3, 0, 1").expect("parses");
        let mut rng = Rng::with_seed(3);
        let mut seen = [0u32; 4];
        for _ in 0..4000 {
            seen[mix.pick(&mut rng)] += 1;
        }
        assert_eq!((seen[CREATE], seen[DELETE]), (0, 0));
        assert!(seen[UPDATE] > 2700 && seen[EVENT] > 800, "{seen:?}");
    }

    #[test]
    fn names_are_unique_and_namespaced() {
        let namer = Namer::new(3);
        let a = namer.next(&RESOURCES[0]);
        let b = namer.next(&RESOURCES[0]);
        assert_ne!(a, b);
        let a = String::from_utf8_lossy(&a).to_string();
        assert!(a.starts_with("/registry/pods/ns-0000/pod-"), "{a}");
        assert!(String::from_utf8_lossy(&b).starts_with("/registry/pods/ns-0001/pod-"));
        assert_eq!(&Nodes::key(7)[..], b"/registry/leases/kube-node-lease/node-00007");
    }
}
