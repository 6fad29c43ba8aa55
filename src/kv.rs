//! The KV service: reads are served from the read view on the caller's task; writes go to the
//! StoreActor and are answered after their group commit.

use std::sync::Arc;

use actix::Addr;
use prost::Message;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use actcd_actors::store::alarm::Alarms;
use actcd_actors::store::{txn, validate, Command, CommandResponse, ReadView, RocksEngine, StoreError};
use actcd_actors::store_actor::{StoreActor, Write};
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::{
    AlarmType, CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};

use crate::status::to_status;
use actcd_actors::identity::Identity;

/// The handles a service needs to reach the store.
#[derive(Clone)]
pub struct StoreHandle {
    /// Concurrent reads.
    pub view: ReadView<RocksEngine>,
    /// The single writer.
    pub writer: Addr<StoreActor<RocksEngine>>,
    /// Header identity.
    pub identity: Identity,
    /// `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// `--max-request-bytes`.
    pub max_request_bytes: usize,
    /// Active alarms: they refuse some writes.
    pub alarms: Arc<Alarms<RocksEngine>>,
    /// The engine itself, for maintenance that works below the store (checkpoints,
    /// defragmentation, hashes).
    pub engine: RocksEngine,
}

impl StoreHandle {
    /// Sends a command to the writer and waits for its durable answer.
    pub async fn write(&self, command: Command) -> Result<CommandResponse, Status> {
        self.write_raw(command).await.map_err(to_status)
    }

    /// [`StoreHandle::write`], with the store's own error.
    ///
    /// An active alarm may refuse the command first; a write that finds the store over its
    /// quota raises NOSPACE.
    pub async fn write_raw(&self, command: Command) -> Result<CommandResponse, StoreError> {
        self.alarms.check(&command)?;
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Write { command, reply })
            .await
            .map_err(|_| StoreError::Stopped("writer is gone".into()))?;
        let answer = answer.await.map_err(|_| StoreError::Stopped("writer dropped the request".into()))?;
        if let Err(StoreError::NoSpace) = answer {
            self.raise_alarm(AlarmType::Nospace).await;
        }
        answer
    }

    /// Raises `alarm` for this member (durably, off the async threads).
    pub async fn raise_alarm(&self, alarm: AlarmType) {
        let alarms = Arc::clone(&self.alarms);
        let member = self.identity.member_id;
        match tokio::task::spawn_blocking(move || alarms.activate(member, alarm)).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::error!(%err, ?alarm, "cannot raise an alarm"),
            Err(err) => tracing::error!(%err, ?alarm, "cannot raise an alarm"),
        }
    }

    /// etcd refuses a write whose marshalled request exceeds `--max-request-bytes`.
    fn check_size(&self, req: &impl Message) -> Result<(), Status> {
        if req.encoded_len() > self.max_request_bytes {
            return Err(to_status(StoreError::RequestTooLarge));
        }
        Ok(())
    }
}

/// The KV service.
pub struct KvService {
    store: StoreHandle,
}

impl KvService {
    /// A KV service over `store`.
    pub fn new(store: StoreHandle) -> Self {
        Self { store }
    }
}

fn unexpected(resp: CommandResponse) -> Status {
    Status::internal(format!("writer answered with the wrong response kind: {resp:?}"))
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, request: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let mut resp = self.store.view.range(request.get_ref()).map_err(to_status)?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let req = request.into_inner();
        validate::check_put(&req).map_err(to_status)?;
        self.store.check_size(&req)?;
        match self.store.write(Command::Put(req)).await? {
            CommandResponse::Put(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let req = request.into_inner();
        validate::check_delete(&req).map_err(to_status)?;
        self.store.check_size(&req)?;
        match self.store.write(Command::DeleteRange(req)).await? {
            CommandResponse::DeleteRange(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let req = request.into_inner();
        validate::check_txn(&req, self.store.max_txn_ops).map_err(to_status)?;
        if txn::is_read_only(&req) {
            let mut resp = self.store.view.read_only_txn(&req, self.store.max_txn_ops).map_err(to_status)?;
            self.store.identity.fill(&mut resp.header);
            return Ok(Response::new(resp));
        }
        self.store.check_size(&req)?;
        match self.store.write(Command::Txn(req)).await? {
            CommandResponse::Txn(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let req = request.into_inner();
        match self.store.write(Command::Compact(req)).await? {
            CommandResponse::Compact(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected(other)),
        }
    }
}
