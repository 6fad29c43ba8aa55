//! The Lease service: grants and revokes are durable commands through the Raft log; the
//! LeaseActor keeps deadlines, answers keep-alives (one KeepAliveStream actor per stream) and
//! time-to-live, and revokes what expires.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use actix::{Actor, Addr, AsyncContext};
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Request, Status, Streaming};

use actcd_actors::lease::actor::LeaseActor;
use actcd_actors::lease::keepalive::{KeepAliveStream, RenewCheck};
use actcd_actors::lease::messages::Remaining;
use actcd_edge::grpc_go_errors::stream_receive_error;
use actcd_edge::status::to_status;
use actcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest,
    LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseStatus, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse, ResponseHeader,
};
use actcd_proto::key_range::KeyRange;
use actcd_store::auth_store::{Access, Need};
use actcd_store::StoreError;

use crate::grpc::arbiter_pool::ArbiterPool;
use crate::grpc::store_handle::StoreHandle;
use crate::grpc::who::{self, Who};

/// Keep-alive answers queued towards one client before its stream actor waits.
const RESPONSE_BUFFER: usize = 16;
/// Server-chosen ids that collide with an existing lease are retried this often.
const ID_ATTEMPTS: usize = 8;

/// The Lease service.
pub struct LeaseService {
    pub(super) store: StoreHandle,
    leases: Addr<LeaseActor>,
    arbiters: Arc<ArbiterPool>,
    next_id: AtomicI64,
}

impl LeaseService {
    /// A keep-alive stream fed by `requests` (a gRPC stream's, or the JSON gateway's), with
    /// the rights of the caller whose `metadata` and `extensions` they are: the caller needs a
    /// user, and each renewal is checked again against the auth state of its moment.
    pub async fn open_keep_alive(
        &self,
        metadata: &MetadataMap,
        extensions: &Extensions,
        requests: impl Stream<Item = LeaseKeepAliveRequest> + Send + 'static,
    ) -> Result<impl Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send + 'static, Status> {
        let caller = Request::from_parts(metadata.clone(), extensions.clone(), ());
        self.store.who(&caller).await?.need(Need::User)?;
        let (token, common_name) = (
            who::token(metadata).map(str::to_owned),
            who::common_name_of(metadata, extensions).map(str::to_owned),
        );
        let store = self.store.clone();
        let check: Arc<RenewCheck> = Arc::new(move |id| {
            let who = Who::with_token(&store.view, &store.tokens, token.as_deref(), common_name.as_deref())?;
            who.renewal(id, &|id| store.lease_keys(id))?;
            Ok(who.checked_at())
        });
        let arbiter = self.arbiters.next()?;
        let (output, responses) = mpsc::channel(RESPONSE_BUFFER);
        let (leases, view, identity) =
            (self.leases.clone(), self.store.view.clone(), self.store.identity.clone());
        KeepAliveStream::start_in_arbiter(arbiter, move |ctx| {
            ctx.add_stream(requests);
            KeepAliveStream::new(leases, output, view, identity, check)
        });
        Ok(ReceiverStream::new(responses)
            .map(|r: Result<Box<LeaseKeepAliveResponse>, StoreError>| r.map(|r| *r).map_err(to_status)))
    }

    /// A lease service over `store` and the lease actor; keep-alive streams run on `arbiters`.
    pub fn new(store: StoreHandle, leases: Addr<LeaseActor>, arbiters: Arc<ArbiterPool>) -> Self {
        // Ids are a counter that starts from the clock, member-prefixed like etcd's, so ids
        // from before a restart are unlikely to be handed out again (the store refuses them).
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(1);
        let prefix = ((store.identity.member_id & 0xffff) as i64) << 47;
        let next_id = AtomicI64::new(prefix | ((clock << 8) & ((1 << 47) - 1)));
        Self { store, leases, arbiters, next_id }
    }

    fn fresh_id(&self) -> i64 {
        (self.next_id.fetch_add(1, Ordering::Relaxed) & i64::MAX).max(1)
    }

    /// LeaseKeepAlive on gRPC: the requests of the stream, until the first bad one.
    pub(super) async fn keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<BoxStream<LeaseKeepAliveResponse>, Status> {
        let (metadata, extensions, requests) = request.into_parts();
        // As for Watch: a bad message ends the stream, with grpc-go's error.
        let (error_tx, error_rx) = oneshot::channel::<Status>();
        let mut error_tx = Some(error_tx);
        let input = requests
            .map(move |r| match r {
                Ok(req) => Some(req),
                Err(status) => {
                    if let Some(tx) = error_tx.take() {
                        let _ = tx.send(status);
                    }
                    None
                }
            })
            .take_while(|r| futures::future::ready(r.is_some()))
            .filter_map(futures::future::ready);
        let out = self.open_keep_alive(&metadata, &extensions, input).await?;
        let failed = futures::stream::once(error_rx)
            .filter_map(|r| futures::future::ready(r.ok().and_then(stream_receive_error).map(Err)));
        Ok(Box::pin(out.chain(failed)))
    }

    pub(super) async fn grant(
        &self,
        request: Request<LeaseGrantRequest>,
    ) -> Result<LeaseGrantResponse, Status> {
        let who = self.store.who(&request).await?;
        let req = request.into_inner();
        for _ in 0..ID_ATTEMPTS {
            let id = if req.id != 0 { req.id } else { self.fresh_id() };
            let grant = LeaseGrantRequest { id, ttl: req.ttl };
            match self.store.write_raw(&who, grant).await {
                Ok(mut resp) => {
                    self.store.identity.fill(&mut resp.header);
                    return Ok(resp);
                }
                Err(StoreError::LeaseExists) if req.id == 0 => continue,
                Err(err) => return Err(to_status(err)),
            }
        }
        Err(to_status(StoreError::LeaseExists))
    }

    pub(super) async fn revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Result<LeaseRevokeResponse, Status> {
        let who = self.store.who(&request).await?;
        self.store.write_answered(&who, request.into_inner()).await
    }

    pub(super) async fn time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Result<LeaseTimeToLiveResponse, Status> {
        let (who, header) = self.user_at_now(&request).await?;
        let req = request.into_inner();
        let stopped = |_: actix::MailboxError| to_status(StoreError::Stopped("actor gone".into()));
        let remaining =
            self.leases.send(Remaining { id: req.id, forwarded: false }).await.map_err(stopped)?;
        let Some((ttl, granted_ttl)) = remaining.map_err(to_status)? else {
            return Ok(LeaseTimeToLiveResponse { header, id: req.id, ttl: -1, ..Default::default() });
        };
        let keys = if req.keys {
            let keys = self.store.lease_keys(req.id);
            // etcd's fix of CVE-2023-32082: the keys only to a user who may read every one.
            for key in &keys {
                who.need(Need::Keys(Access::Read, KeyRange::Key(key)))?;
            }
            keys.into_iter().map(|k| k.into_vec().into()).collect()
        } else {
            Vec::new()
        };
        who.still_current(&self.store.view)?;
        Ok(LeaseTimeToLiveResponse { header, id: req.id, ttl, granted_ttl, keys })
    }

    pub(super) async fn list(
        &self,
        request: Request<LeaseLeasesRequest>,
    ) -> Result<LeaseLeasesResponse, Status> {
        let (who, header) = self.user_at_now(&request).await?;
        let list = self.store.core.lock().map_err(to_status)?.lease_list();
        if who.user().is_some() {
            // etcd 3.4.42 on: the list only to a user who may read every key of every lease.
            for (id, _) in &list {
                for key in self.store.lease_keys(*id) {
                    who.need(Need::Keys(Access::Read, KeyRange::Key(&key)))?;
                }
            }
        }
        who.still_current(&self.store.view)?;
        let leases = list.into_iter().map(|(id, _)| LeaseStatus { id }).collect();
        Ok(LeaseLeasesResponse { header, leases })
    }

    /// The sender, who must be a user, and the header of this moment's revision.
    async fn user_at_now<T>(&self, request: &Request<T>) -> Result<(Who, Option<ResponseHeader>), Status> {
        let who = self.store.who(request).await?;
        who.need(Need::User)?;
        Ok((who, self.store.header()))
    }
}
