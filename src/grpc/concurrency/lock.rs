//! The Lock service: clientv3's Mutex on the caller's lease.
//!
//! Lock puts `name/<lease>` unless that key exists (locking twice with one lease is one
//! hold), and in the same txn reads the oldest key under `name/`. Its own key being the oldest
//! means the lock is held; otherwise it waits for every older key to go ([`wait_deletes`]).
//! A caller that gives up while waiting (cancels, disconnects) has its key deleted, as
//! clientv3 deletes it, so it does not hold the lock later with nobody to release it.
//! With no lease given, a lease of [`SESSION_TTL`] seconds is granted and never kept alive:
//! the lock goes when it expires (etcd's server orphans the session the same way).

use actcd_proto::etcdserverpb::TxnRequest;
use actcd_proto::v3lockpb::lock_server::Lock;
use actcd_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use tonic::{Request, Response, Status};

use super::local::{created_at, delete_op, get_op, put_op, range_at, range_op, Backends, Local};
use super::waits::{wait_deletes, Abandon};
use super::{first_created, own_key, prefix, SESSION_TTL};

/// The Lock service.
pub struct LockService {
    backends: Backends,
}

impl LockService {
    /// Locks kept in the keys of `backends`' KV.
    pub fn new(backends: Backends) -> Self {
        Self { backends }
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, request: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let LockRequest { name, lease } = request.into_inner();
        let lease = if lease == 0 { local.grant(SESSION_TTL).await? } else { lease };
        let prefix = prefix(&name);
        let key = own_key(&prefix, lease);
        let txn = TxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![put_op(&key, b"", lease), range_op(first_created(&prefix))],
            failure: vec![get_op(&key), range_op(first_created(&prefix))],
        };
        let answer = local.txn(txn).await?;
        let header = super::header(answer.header);
        let mine = match answer.succeeded {
            true => header.revision,
            false => range_at(&answer, 0).and_then(|r| r.kvs.first()).map_or(0, |kv| kv.create_revision),
        };
        let owner = range_at(&answer, 1).and_then(|r| r.kvs.first()).map(|kv| kv.create_revision);
        if owner.is_none_or(|owner| owner == mine) {
            return Ok(Response::new(LockResponse { header: Some(header), key: key.into() }));
        }
        let abandon =
            Abandon::new(&local, TxnRequest { success: vec![delete_op(&key)], ..Default::default() });
        let header = wait_deletes(&local, &prefix, mine - 1).await?;
        abandon.disarm();
        Ok(Response::new(LockResponse { header: Some(header), key: key.into() }))
    }

    async fn unlock(&self, request: Request<UnlockRequest>) -> Result<Response<UnlockResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let deleted = local.delete(&request.into_inner().key).await?;
        Ok(Response::new(UnlockResponse { header: deleted.header }))
    }
}
