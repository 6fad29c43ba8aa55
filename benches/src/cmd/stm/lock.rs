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

use crate::conn::{status_text, Conn, MAX_RESPONSE};
use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use actcd_proto::etcdserverpb::request_op::Request;
use actcd_proto::etcdserverpb::response_op::Response;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::watch_request::RequestUnion;
use actcd_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, PutRequest,
    RangeRequest, RangeResponse, RequestOp, ResponseHeader, TxnRequest, WatchCreateRequest, WatchRequest,
};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;
use bytes::Bytes;
use futures::StreamExt;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Status;

/// The lock's name (etcd benchmark's); the mutex's keys live under `stmlock/`.
const LOCK_NAME: &str = "stmlock";
/// A session's lease TTL, seconds (etcd's default session TTL).
const SESSION_TTL: i64 = 60;

/// A lease kept alive until [`Session::close`] (or the drop of the session).
pub struct Session {
    /// The lease.
    pub lease: i64,
    lease_client: LeaseClient<Conn>,
    keep_alive: JoinHandle<()>,
}

impl Session {
    /// Grants the lease on `channel` and starts keeping it alive.
    pub async fn open(channel: Conn) -> Result<Self, Status> {
        let mut lease_client = LeaseClient::new(channel);
        let grant =
            lease_client.lease_grant(LeaseGrantRequest { ttl: SESSION_TTL, id: 0 }).await?.into_inner();
        if !grant.error.is_empty() {
            return Err(Status::unknown(format!("lease grant: {}", grant.error)));
        }
        let lease = grant.id;
        let mut client = lease_client.clone();
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
        let _ = tokio::time::timeout(
            bound,
            self.lease_client.lease_revoke(LeaseRevokeRequest { id: self.lease }),
        )
        .await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

fn range_op(range: RangeRequest) -> RequestOp {
    RequestOp { request: Some(Request::RequestRange(range)) }
}

fn range_of(op: Option<&actcd_proto::etcdserverpb::ResponseOp>) -> Option<&RangeResponse> {
    match op?.response.as_ref()? {
        Response::ResponseRange(r) => Some(r),
        _ => None,
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
    /// The mutex of the session with `lease`, over `channel`.
    pub fn new(channel: Conn, lease: i64) -> Self {
        let prefix = Bytes::from(format!("{LOCK_NAME}/"));
        Self {
            kv: KvClient::new(channel.clone()).max_decoding_message_size(MAX_RESPONSE),
            watch: WatchClient::new(channel).max_decoding_message_size(MAX_RESPONSE),
            key: Bytes::from(format!("{LOCK_NAME}/{lease:x}")),
            prefix,
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

    /// Waits until this session holds the lock.
    pub async fn lock(&mut self) -> Result<(), String> {
        let mine = RangeRequest { key: self.key.clone(), ..Default::default() };
        let owner = self.edge(SortOrder::Ascend, 0);
        // Put our key unless it exists (a session that holds the lock already keeps it), and
        // read the oldest key in the same round trip.
        let txn = TxnRequest {
            compare: vec![Compare {
                key: self.key.clone(),
                result: CompareResult::Equal as i32,
                target: CompareTarget::Create as i32,
                target_union: Some(TargetUnion::CreateRevision(0)),
                ..Default::default()
            }],
            success: vec![
                RequestOp {
                    request: Some(Request::RequestPut(PutRequest {
                        key: self.key.clone(),
                        lease: self.lease,
                        ..Default::default()
                    })),
                },
                range_op(owner.clone()),
            ],
            failure: vec![range_op(mine.clone()), range_op(owner)],
        };
        let r = self.kv.txn(txn).await.map_err(|s| format!("lock: {}", status_text(&s)))?.into_inner();
        let my_rev = if r.succeeded {
            r.header.as_ref().map_or(0, |h: &ResponseHeader| h.revision)
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
        let still = self.kv.range(mine).await.map_err(|s| format!("lock: {}", status_text(&s)))?.into_inner();
        if still.kvs.is_empty() {
            return Err("mutex: session is expired".to_string());
        }
        Ok(())
    }

    /// Waits until no key under the prefix has a create revision at most `max_create`: for the
    /// newest such key, a watch from the revision it was read at until its deletion, again.
    async fn wait_older_deleted(&mut self, max_create: i64) -> Result<(), String> {
        loop {
            let newest = self.edge(SortOrder::Descend, max_create);
            let r =
                self.kv.range(newest).await.map_err(|s| format!("lock: {}", status_text(&s)))?.into_inner();
            let Some(kv) = r.kvs.first() else { return Ok(()) };
            let from = r.header.as_ref().map_or(0, |h| h.revision);
            self.wait_deleted(kv.key.clone(), from).await?;
        }
    }

    async fn wait_deleted(&mut self, key: Bytes, from: i64) -> Result<(), String> {
        let create = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key,
                start_revision: from,
                ..Default::default()
            })),
        };
        // The request side stays open (a closed one ends the stream on etcd) until this returns.
        let requests = futures::stream::iter([create]).chain(futures::stream::pending());
        let mut events =
            self.watch.watch(requests).await.map_err(|s| format!("lock: {}", status_text(&s)))?.into_inner();
        loop {
            match events.message().await {
                Ok(Some(r)) if r.events.iter().any(|e| e.r#type == EventType::Delete as i32) => return Ok(()),
                Ok(Some(r)) if r.canceled => {
                    return Err(format!("lock: watch canceled: {}", r.cancel_reason))
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err("lock: lost watcher waiting for delete".to_string()),
                Err(s) => return Err(format!("lock: {}", status_text(&s))),
            }
        }
    }

    /// Releases the lock: deletes this session's key.
    pub async fn unlock(&mut self) -> Result<(), String> {
        let delete = DeleteRangeRequest { key: self.key.clone(), ..Default::default() };
        self.kv.delete_range(delete).await.map(|_| ()).map_err(|s| format!("unlock: {}", status_text(&s)))
    }
}

/// etcd's `v3lockpb` messages, the fields read (the header is skipped, and UnlockResponse has
/// nothing else): the Lock service is etcd's, outside the KV API this project's proto crate
/// defines (actcd does not serve it, and answers UNIMPLEMENTED).
mod v3lockpb {
    use bytes::Bytes;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LockRequest {
        #[prost(bytes = "bytes", tag = "1")]
        pub name: Bytes,
        #[prost(int64, tag = "2")]
        pub lease: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LockResponse {
        #[prost(bytes = "bytes", tag = "2")]
        pub key: Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct UnlockRequest {
        #[prost(bytes = "bytes", tag = "1")]
        pub key: Bytes,
    }
}

/// The server's Lock service, for one session.
pub struct RpcLock {
    grpc: tonic::client::Grpc<Conn>,
    lease: i64,
    /// The key the last Lock answered with, which Unlock deletes.
    held: Bytes,
}

impl RpcLock {
    /// The lock of the session with `lease`, over `channel`.
    pub fn new(channel: Conn, lease: i64) -> Self {
        Self { grpc: tonic::client::Grpc::new(channel), lease, held: Bytes::new() }
    }

    async fn call<Q, A>(&mut self, path: &'static str, request: Q) -> Result<A, Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc.ready().await.map_err(|e| Status::unavailable(format!("service not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Q, A>::default();
        let r = self.grpc.unary(tonic::Request::new(request), PathAndQuery::from_static(path), codec).await?;
        Ok(r.into_inner())
    }

    /// Waits until this session holds the lock.
    pub async fn lock(&mut self) -> Result<(), Status> {
        let request =
            v3lockpb::LockRequest { name: Bytes::from_static(LOCK_NAME.as_bytes()), lease: self.lease };
        let r: v3lockpb::LockResponse = self.call("/v3lockpb.Lock/Lock", request).await?;
        self.held = r.key;
        Ok(())
    }

    /// Releases the lock.
    pub async fn unlock(&mut self) -> Result<(), Status> {
        let request = v3lockpb::UnlockRequest { key: self.held.clone() };
        self.call::<_, ()>("/v3lockpb.Lock/Unlock", request).await
    }
}
