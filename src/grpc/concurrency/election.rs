//! The Election service: clientv3's Election on the caller's lease.
//!
//! Campaign puts `name/<lease>` = value unless that key exists (then it re-proclaims the
//! value if it differs) and waits until every older campaigner is gone: the oldest key leads.
//! Its LeaderKey (key, create revision, lease) is the leadership: Proclaim and Resign act only
//! while the key still has that create revision, so a leader whose lease expired, and whose
//! key someone re-created, cannot speak for the new one.
//!
//! Observe streams the leader's value, then each change of it, then the next leader's, ...:
//! it reads the oldest key (or, with none, watches the prefix for the first put), then watches
//! that key until it is deleted, and starts over.

use actcd_proto::errors::election;
use actcd_proto::etcdserverpb::{ResponseHeader, TxnRequest, WatchCreateRequest};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;
use actcd_proto::mvccpb::KeyValue;
use actcd_proto::v3electionpb::election_server::Election;
use actcd_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::local::{created_at, delete_op, get_op, put_op, range_at, Backends, Local};
use super::waits::{wait_deletes, Abandon};
use super::{first_created, own_key, prefix, SESSION_TTL};

/// Leader answers an Observe stream queues before it waits for its client: the observer
/// task then waits too, so a client that stops reading holds one task and a few answers.
const OBSERVE_BUFFER: usize = 4;

/// The Election service.
pub struct ElectionService {
    backends: Backends,
}

impl ElectionService {
    /// Elections kept in the keys of `backends`' KV.
    pub fn new(backends: Backends) -> Self {
        Self { backends }
    }
}

/// Puts `value` on the leader's key while it has the leader's create revision.
async fn proclaim(local: &Local, leader: &LeaderKey, value: &[u8]) -> Result<ResponseHeader, Status> {
    let txn = TxnRequest {
        compare: vec![created_at(&leader.key, leader.rev)],
        success: vec![put_op(&leader.key, value, leader.lease)],
        failure: vec![],
    };
    let answer = local.txn(txn).await?;
    if !answer.succeeded {
        return Err(Status::unknown(election::NOT_LEADER));
    }
    Ok(super::header(answer.header))
}

/// Deletes the leader's key while it has the leader's create revision.
fn resignation(leader: &LeaderKey) -> TxnRequest {
    TxnRequest {
        compare: vec![created_at(&leader.key, leader.rev)],
        success: vec![delete_op(&leader.key)],
        failure: vec![],
    }
}

async fn resign(local: &Local, leader: &LeaderKey) -> Result<ResponseHeader, Status> {
    Ok(super::header(local.txn(resignation(leader)).await?.header))
}

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        request: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let CampaignRequest { name, lease, value } = request.into_inner();
        let lease = if lease == 0 { local.grant(SESSION_TTL).await? } else { lease };
        let prefix = prefix(&name);
        let key = own_key(&prefix, lease);
        let txn = TxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![put_op(&key, &value, lease)],
            failure: vec![get_op(&key)],
        };
        let answer = local.txn(txn).await?;
        let header = super::header(answer.header);
        let mut leader =
            LeaderKey { name: name.clone(), key: key.clone().into(), rev: header.revision, lease };
        if !answer.succeeded {
            let existing = range_at(&answer, 0).and_then(|r| r.kvs.first());
            leader.rev = existing.map_or(0, |kv| kv.create_revision);
            if existing.is_some_and(|kv| kv.value != value) {
                if let Err(status) = proclaim(&local, &leader, &value).await {
                    let _ = resign(&local, &leader).await;
                    return Err(status);
                }
            }
        }
        let abandon = Abandon::new(&local, resignation(&leader));
        wait_deletes(&local, &prefix, leader.rev - 1).await?;
        abandon.disarm();
        Ok(Response::new(CampaignResponse { header: Some(header), leader: Some(leader) }))
    }

    async fn proclaim(
        &self,
        request: Request<ProclaimRequest>,
    ) -> Result<Response<ProclaimResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let ProclaimRequest { leader, value } = request.into_inner();
        let leader = leader.ok_or_else(|| Status::unknown(election::MISSING_LEADER_KEY))?;
        let header = proclaim(&local, &leader, &value).await?;
        Ok(Response::new(ProclaimResponse { header: Some(header) }))
    }

    async fn leader(&self, request: Request<LeaderRequest>) -> Result<Response<LeaderResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let answer = local.range(first_created(&prefix(&request.into_inner().name))).await?;
        let kv = answer.kvs.into_iter().next().ok_or_else(|| Status::unknown(election::NO_LEADER))?;
        Ok(Response::new(LeaderResponse { header: answer.header, kv: Some(kv) }))
    }

    async fn observe(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<Response<BoxStream<LeaderResponse>>, Status> {
        let local = Local::of(&self.backends, &request);
        let prefix = prefix(&request.into_inner().name);
        // Full: the task waits for the client to read (see OBSERVE_BUFFER); closed (the
        // client went away): the task's next send fails and it ends, its watches with it.
        let (answers, out) = mpsc::channel(OBSERVE_BUFFER);
        tokio::spawn(async move {
            if let Stop::Failed(status) = observe_leaders(&local, &prefix, &answers).await {
                tracing::debug!(%status, "election observer ended");
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(out).map(Ok))))
    }

    async fn resign(&self, request: Request<ResignRequest>) -> Result<Response<ResignResponse>, Status> {
        let local = Local::of(&self.backends, &request);
        let leader =
            request.into_inner().leader.ok_or_else(|| Status::unknown(election::MISSING_LEADER_KEY))?;
        let header = resign(&local, &leader).await?;
        Ok(Response::new(ResignResponse { header: Some(header) }))
    }
}

/// Why an observer stopped: its client left, or a read or watch failed (the stream then ends,
/// as etcd's does, without an error).
enum Stop {
    ClientGone,
    Failed(Status),
}

impl From<Status> for Stop {
    fn from(status: Status) -> Self {
        Stop::Failed(status)
    }
}

async fn observe_leaders(local: &Local, prefix: &[u8], answers: &mpsc::Sender<LeaderResponse>) -> Stop {
    let send = |header: ResponseHeader, kv: KeyValue| async move {
        answers
            .send(LeaderResponse { header: Some(header), kv: Some(kv) })
            .await
            .map_err(|_| Stop::ClientGone)
    };
    loop {
        let (header, kv) = match leader_now(local, prefix).await {
            Ok(found) => found,
            Err(stop) => return stop,
        };
        let revision = header.revision;
        let key = kv.key.clone();
        if let Err(stop) = send(header, kv).await {
            return stop;
        }
        // The leader's changes until its key is deleted; then the next leader.
        let create =
            WatchCreateRequest { key: key.clone(), start_revision: revision + 1, ..Default::default() };
        let mut changes = match local.watch(create) {
            Ok(changes) => changes,
            Err(status) => return Stop::Failed(status),
        };
        'changes: loop {
            let response = match changes.next().await {
                Some(Ok(response)) if !response.canceled => response,
                Some(Err(status)) => return Stop::Failed(status),
                _ => return Stop::Failed(Status::unknown("observe: watch ended")),
            };
            for event in response.events {
                if event.r#type == EventType::Delete as i32 {
                    break 'changes;
                }
                let Some(kv) = event.kv else { continue };
                if let Err(stop) = send(super::header(response.header), kv).await {
                    return stop;
                }
            }
        }
    }
}

/// The current leader's key, or, with none, the first one put under the prefix after.
async fn leader_now(local: &Local, prefix: &[u8]) -> Result<(ResponseHeader, KeyValue), Stop> {
    let answer = local.range(first_created(prefix)).await?;
    let mut header = super::header(answer.header);
    if let Some(kv) = answer.kvs.into_iter().next() {
        return Ok((header, kv));
    }
    let create = WatchCreateRequest {
        key: prefix.to_vec().into(),
        range_end: prefix_end(prefix).into(),
        start_revision: header.revision,
        ..Default::default()
    };
    let mut puts = local.watch(create)?;
    while let Some(response) = puts.next().await {
        let response = response?;
        if response.canceled {
            break;
        }
        // Only a put names a leader; a delete here would only make the loop spin.
        if let Some(kv) =
            response.events.into_iter().find(|e| e.r#type == EventType::Put as i32).and_then(|e| e.kv)
        {
            header = super::header(response.header);
            header.revision = kv.mod_revision;
            return Ok((header, kv));
        }
    }
    Err(Stop::Failed(Status::unknown("observe: watch ended")))
}
