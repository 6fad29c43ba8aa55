//! The KV service: reads are served from the read view on the caller's task; writes go to the
//! StoreActor and are answered after their group commit.

use prost::Message;
use tonic::{Request, Response, Status};

use actcd_actors::store::mvcc::{txn, validate};
use actcd_actors::store::{Command, CommandResponse, StoreError};
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};

use crate::grpc::status::{to_status, unexpected_answer};
use crate::grpc::store_handle::StoreHandle;

/// The KV service.
pub struct KvService {
    store: StoreHandle,
}

impl KvService {
    /// A KV service over `store`.
    pub fn new(store: StoreHandle) -> Self {
        Self { store }
    }

    /// etcd refuses a write whose marshalled request exceeds `--max-request-bytes`.
    fn check_size(&self, req: &impl Message) -> Result<(), Status> {
        if req.encoded_len() > self.store.max_request_bytes {
            return Err(to_status(StoreError::RequestTooLarge));
        }
        Ok(())
    }
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
        self.check_size(&req)?;
        match self.store.write(Command::Put(req)).await? {
            CommandResponse::Put(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected_answer(other)),
        }
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let req = request.into_inner();
        validate::check_delete(&req).map_err(to_status)?;
        self.check_size(&req)?;
        match self.store.write(Command::DeleteRange(req)).await? {
            CommandResponse::DeleteRange(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected_answer(other)),
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
        self.check_size(&req)?;
        match self.store.write(Command::Txn(req)).await? {
            CommandResponse::Txn(mut resp) => {
                self.store.identity.fill(&mut resp.header);
                Ok(Response::new(resp))
            }
            other => Err(unexpected_answer(other)),
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
            other => Err(unexpected_answer(other)),
        }
    }
}
