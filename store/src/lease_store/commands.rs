//! The lease commands as the writer applies them: a grant records the lease and its TTL, a
//! revoke deletes the lease's keys in one revision and then the lease. Which leases exist and
//! which keys each holds is [`crate::lease_store::index`]; when a lease expires is the LeaseActor's
//! business, which turns expiries into revoke commands like a client's.

use actcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest, LeaseRevokeResponse, ResponseHeader,
};

use crate::apply::writer::{LeaseChange, StoreCore};
use crate::backend::codec;
use crate::backend::engine::{Engine, Family};
use crate::error::StoreError;
use crate::lease_store::index::{MAX_LEASE_TTL, MIN_LEASE_TTL};
use crate::mvcc::batch::Batch;

impl<E: Engine> StoreCore<E> {
    /// Leases and the granted TTL of each.
    pub fn lease_list(&self) -> Vec<(i64, i64)> {
        self.leases.list()
    }

    /// The keys attached to lease `id`, if it exists.
    pub fn lease_keys(&self, id: i64) -> Option<Vec<Box<[u8]>>> {
        self.leases.keys(id)
    }

    /// Estimated heap bytes of the lease index.
    pub fn lease_heap_bytes(&self) -> usize {
        self.leases.heap_bytes()
    }

    pub(crate) fn lease_grant(
        &mut self,
        req: &LeaseGrantRequest,
        batch: &mut Batch,
    ) -> Result<LeaseGrantResponse, StoreError> {
        if req.ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge);
        }
        if req.id == 0 || self.leases.exists(req.id) {
            return Err(StoreError::LeaseExists);
        }
        let ttl = req.ttl.max(MIN_LEASE_TTL);
        batch.writes.put(Family::Lease, codec::encode_i64(req.id), codec::encode_i64(ttl));
        self.leases.grant(req.id, ttl);
        if let Some(journal) = self.lease_journal.as_mut() {
            journal.push(LeaseChange::Granted { id: req.id, ttl });
        }
        Ok(LeaseGrantResponse {
            header: Some(ResponseHeader { revision: self.current, ..Default::default() }),
            id: req.id,
            ttl,
            error: String::new(),
        })
    }

    pub(crate) fn lease_revoke(
        &mut self,
        req: &LeaseRevokeRequest,
        batch: &mut Batch,
    ) -> Result<LeaseRevokeResponse, StoreError> {
        let keys = self.leases.keys(req.id).ok_or(StoreError::LeaseNotFound)?;
        let revision = self.in_txn(batch, |ctx| {
            ctx.delete_keys(&keys)?;
            Ok(ctx.read_rev())
        })?;
        self.leases.revoke(req.id);
        if let Some(journal) = self.lease_journal.as_mut() {
            journal.push(LeaseChange::Revoked(req.id));
        }
        batch.writes.delete(Family::Lease, codec::encode_i64(req.id));
        Ok(LeaseRevokeResponse { header: Some(ResponseHeader { revision, ..Default::default() }) })
    }
}
