//! The locks `stm --stm-locker` wraps each transaction in, as etcd's client builds them:
//!
//! - a [`Session`]: a lease (TTL 60 s, etcd's default) kept alive by a LeaseKeepAlive stream
//!   every third of its TTL, revoked when the run ends;
//! - `lock-client`, a [`Mutex`] over keys: each client puts `stmlock/<lease in hex>` (with its
//!   lease) if it has no key yet; the key with the lowest create revision under `stmlock/` holds
//!   the lock, and the others wait, each for the deletion of the next older key (a watch from
//!   the revision it read), then check that their own key still exists;
//! - `lock-rpc`, the server's Lock service (etcd's `v3lockpb.Lock`), which does the same on the
//!   server: Lock(name `stmlock`, the lease) answers with the held key, Unlock deletes it.

use crate::cmd::{compare, range_of, range_op};
use crate::conn::{kv_client, watch_client, Conn, OpError};
use actcd_proto::etcdserverpb::compare::{CompareResult, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::{
    DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, PutRequest,
    RangeRequest, RequestOp, TxnRequest,
};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;
use actcd_proto::v3lockpb::lock_client::LockClient;
use actcd_proto::v3lockpb::{LockRequest, UnlockRequest};
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::Status;

/// The lock's name (etcd benchmark's); the mutex's keys live under `stmlock/`.
const LOCK_NAME: &str = "stmlock";
/// A session's lease TTL, seconds (etcd's default session TTL).
const SESSION_TTL: i64 = 60;

/// A lease kept alive until [`Session::close`] (or the drop of the session).
pub struct Session {
    pub lease: i64,
    lease_client: LeaseClient<Conn>,
    keep_alive: JoinHandle<()>,
}

impl Session {
    pub async fn open(channel: Conn) -> Result<Self, Status> {
        let mut lease_client = LeaseClient::new(channel);
        let grant =
            lease_client.lease_grant(LeaseGrantRequest { ttl: SESSION_TTL, id: 0 }).await?.into_inner();
        if !grant.error.is_empty() {
            return Err(Status::unknown(format!("lease grant: {}", grant.error)));
        }
        let (lease, mut client) = (grant.id, lease_client.clone());
        let keep_alive = tokio::spawn(async move {
            let every = Duration::from_secs(SESSION_TTL as u64 / 3);
            let requests = futures::stream::unfold(true, move |first| async move {
                if !first {
                    tokio::time::sleep(every).await;
                }
                Some((LeaseKeepAliveRequest { id: lease }, false))
            });
            // The answers only need reading; a broken stream ends the keep-alive, and the lock
            // then fails when the lease expires.
            if let Ok(r) = client.lease_keep_alive(requests).await {
                let mut answers = r.into_inner();
                while let Ok(Some(_)) = answers.message().await {}
            }
        });
        Ok(Self { lease, lease_client, keep_alive })
    }

    /// Stops the keep-alive and revokes the lease (and so any lock key left under it).
    pub async fn close(mut self, bound: Duration) {
        self.keep_alive.abort();
        let revoke = self.lease_client.lease_revoke(LeaseRevokeRequest { id: self.lease });
        let _ = tokio::time::timeout(bound, revoke).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

/// etcd's `concurrency.Mutex` on `stmlock/`, for one session.
pub struct Mutex {
    kv: KvClient<Conn>,
    watch: WatchClient<Conn>,
    prefix: Bytes,
    key: Bytes,
    lease: i64,
}

impl Mutex {
    pub fn new(channel: Conn, lease: i64) -> Self {
        Self {
            kv: kv_client(channel.clone()),
            watch: watch_client(channel),
            key: Bytes::from(format!("{LOCK_NAME}/{lease:x}")),
            prefix: Bytes::from(format!("{LOCK_NAME}/")),
            lease,
        }
    }

    /// The oldest (`Ascend`) or newest (`Descend`) key under the prefix, with a create revision
    /// at most `max_create` (0: any).
    fn edge(&self, order: SortOrder, max_create: i64) -> RangeRequest {
        RangeRequest {
            key: self.prefix.clone(),
            range_end: Bytes::from(prefix_end(&self.prefix)),
            limit: 1,
            sort_order: order as i32,
            sort_target: SortTarget::Create as i32,
            max_create_revision: max_create,
            ..Default::default()
        }
    }

    pub async fn lock(&mut self) -> Result<(), OpError> {
        let mine = RangeRequest { key: self.key.clone(), ..Default::default() };
        let owner = range_op(self.edge(SortOrder::Ascend, 0));
        // Put our key unless it exists (a session that holds the lock already keeps it), and
        // read the oldest key in the same round trip.
        let put = PutRequest { key: self.key.clone(), lease: self.lease, ..Default::default() };
        let txn = TxnRequest {
            compare: vec![compare(&self.key, CompareResult::Equal, TargetUnion::CreateRevision(0))],
            success: vec![RequestOp { request: Some(Request::RequestPut(put)) }, owner.clone()],
            failure: vec![range_op(mine.clone()), owner],
        };
        let r = self.kv.txn(txn).await?.into_inner();
        let my_rev = if r.succeeded {
            r.header.as_ref().map_or(0, |h| h.revision)
        } else {
            range_of(r.responses.first()).and_then(|g| g.kvs.first()).map_or(0, |kv| kv.create_revision)
        };
        let oldest = range_of(r.responses.get(1)).and_then(|g| g.kvs.first()).map(|kv| kv.create_revision);
        if oldest.is_none_or(|rev| rev == my_rev) {
            return Ok(());
        }
        if let Err(e) = self.wait_older_deleted(my_rev - 1).await {
            let _ = self.unlock().await;
            return Err(e);
        }
        if self.kv.range(mine).await?.into_inner().kvs.is_empty() {
            return Err(OpError::new("mutex: session is expired"));
        }
        Ok(())
    }

    /// Waits until no key under the prefix has a create revision at most `max_create`: for the
    /// newest such key, a watch from the revision it was read at until its deletion, again.
    async fn wait_older_deleted(&mut self, max_create: i64) -> Result<(), OpError> {
        loop {
            let r = self.kv.range(self.edge(SortOrder::Descend, max_create)).await?.into_inner();
            let Some(kv) = r.kvs.first() else { return Ok(()) };
            let from = r.header.as_ref().map_or(0, |h| h.revision);
            let create = crate::watch_streams::create_request(kv.key.clone(), false, from);
            // The request side stays open (a closed one ends the stream on etcd) until the
            // deletion is seen.
            let requests = futures::stream::iter([create]).chain(futures::stream::pending());
            let mut events = self.watch.watch(requests).await?.into_inner();
            loop {
                match events.message().await? {
                    Some(r) if r.events.iter().any(|e| e.r#type == EventType::Delete as i32) => break,
                    Some(r) if r.canceled => {
                        return Err(format!("lock: watch canceled: {}", r.cancel_reason).into())
                    }
                    Some(_) => {}
                    None => return Err(OpError::new("lock: lost watcher waiting for delete")),
                }
            }
        }
    }

    pub async fn unlock(&mut self) -> Result<(), Status> {
        self.kv
            .delete_range(DeleteRangeRequest { key: self.key.clone(), ..Default::default() })
            .await
            .map(|_| ())
    }
}

/// The server's Lock service, for one session; `held` is the key the last Lock answered with,
/// which Unlock deletes.
pub struct RpcLock {
    client: LockClient<Conn>,
    lease: i64,
    held: Bytes,
}

impl RpcLock {
    pub fn new(channel: Conn, lease: i64) -> Self {
        Self { client: LockClient::new(channel), lease, held: Bytes::new() }
    }

    pub async fn lock(&mut self) -> Result<(), Status> {
        let request = LockRequest { name: Bytes::from_static(LOCK_NAME.as_bytes()), lease: self.lease };
        self.held = self.client.lock(request).await?.into_inner().key;
        Ok(())
    }

    pub async fn unlock(&mut self) -> Result<(), Status> {
        self.client.unlock(UnlockRequest { key: self.held.clone() }).await.map(|_| ())
    }
}
