//! The apiserver's lease manager (pkg/storage/etcd3/lease_manager.go): objects with a TTL
//! (events) are attached to a shared lease, granted with the TTL plus a reuse window and then
//! reused by every such write for that window or up to a number of objects. Nothing keeps the
//! leases alive: they expire, and their events with them.

use crate::conn::{Conn, OpError};
use crate::report::Recorder;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::LeaseGrantRequest;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

// The apiserver's defaults: events live an hour; a lease is reused for 5 % of the TTL, at most
// 60 s, and for at most 1000 objects.
const EVENT_TTL: Duration = Duration::from_secs(3600);
const REUSE_PERCENT: u32 = 5;
const MAX_REUSE: Duration = Duration::from_secs(60);
const MAX_OBJECTS: u64 = 1000;

struct Current {
    id: i64,
    expires: Instant,
    attached: u64,
}

/// The shared lease. Writers wait on one lock while a grant is in flight, as the apiserver's do.
pub struct LeaseManager {
    lease: LeaseClient<Conn>,
    current: Mutex<Option<Current>>,
    grants: Arc<Recorder>,
}

impl LeaseManager {
    pub fn new(conn: Conn, grants: Arc<Recorder>) -> Self {
        Self { lease: LeaseClient::new(conn), current: Mutex::new(None), grants }
    }

    /// The lease the next object with the TTL attaches to: the current one while it outlives
    /// the TTL, expires within TTL + reuse window and has room, else a new grant.
    pub async fn get(&self) -> Result<i64, OpError> {
        let mut current = self.current.lock().await;
        let now = Instant::now();
        let reuse = (EVENT_TTL * REUSE_PERCENT / 100).min(MAX_REUSE);
        if let Some(c) = current.as_mut() {
            c.attached += 1;
            let valid = now + EVENT_TTL < c.expires;
            let sufficient = now + EVENT_TTL + reuse > c.expires;
            if valid && sufficient && c.attached <= MAX_OBJECTS {
                return Ok(c.id);
            }
        }
        let ttl = EVENT_TTL + reuse;
        let (mut lease, sent) = (self.lease.clone(), Instant::now());
        let granted = lease.lease_grant(LeaseGrantRequest { ttl: ttl.as_secs() as i64, id: 0 }).await;
        let id = self.grants.record(sent, granted.map_err(OpError::from))?.into_inner().id;
        *current = Some(Current { id, expires: now + ttl, attached: 1 });
        Ok(id)
    }
}
