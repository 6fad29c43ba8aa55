//! The one instance of each etcd service a member runs. Every client listener's gRPC router
//! and the JSON gateway call these same instances, so a caller meets the same checks whichever
//! door it takes, and Authenticate's bcrypt budget (the AuthService's semaphore) is one for the
//! member, not one per listener.

use std::sync::Arc;

use super::auth::AuthService;
use super::concurrency::election::ElectionService;
use super::concurrency::local::Backends;
use super::concurrency::lock::LockService;
use super::kv::KvService;
use super::lease::LeaseService;
use super::maintenance::{ClusterOps, MaintenanceService};
use super::store_handle::StoreHandle;
use super::watch::WatchService;

/// The services, each shared by every door to it.
pub struct EtcdServices {
    /// Reads on the read view, writes through the log.
    pub kv: Arc<KvService>,
    /// One stream actor per stream; also what Lock and Election wait on.
    pub watch: Arc<WatchService>,
    /// Grants, revokes and keep-alive streams.
    pub lease: Arc<LeaseService>,
    /// Maintenance and Cluster: one type serves both.
    pub maintenance: Arc<MaintenanceService>,
    /// Users, roles, tokens; holds the member's one bcrypt budget.
    pub auth: Arc<AuthService>,
    /// Clients of `kv`, `watch` and `lease`, as etcd's are of its own.
    pub lock: Arc<LockService>,
    /// As `lock`.
    pub election: Arc<ElectionService>,
}

impl EtcdServices {
    /// Builds the services over `store` beside the `watch` and `lease` services the caller
    /// started (they own actors and arbiters); `quota_bytes` and `bcrypt_cost` are the flags
    /// Maintenance and Auth need, `cluster` what changes the membership and the leader.
    pub fn new(
        store: &StoreHandle,
        watch: Arc<WatchService>,
        lease: Arc<LeaseService>,
        quota_bytes: u64,
        bcrypt_cost: u32,
        cluster: ClusterOps,
    ) -> Self {
        let kv = Arc::new(KvService::new(store.clone()));
        let backends = Backends { kv: Arc::clone(&kv), watch: Arc::clone(&watch), lease: Arc::clone(&lease) };
        Self {
            maintenance: Arc::new(MaintenanceService::new(store.clone(), quota_bytes, cluster)),
            auth: Arc::new(AuthService::new(store.clone(), bcrypt_cost)),
            lock: Arc::new(LockService::new(backends.clone())),
            election: Arc::new(ElectionService::new(backends)),
            kv,
            watch,
            lease,
        }
    }
}
