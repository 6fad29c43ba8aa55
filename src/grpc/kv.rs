//! The KV service: reads are served from the read view on the caller's task, a linearizable
//! one (etcd's default) once the read barrier says this member applied everything acknowledged
//! before it, and checked before and after (an auth change during the read refuses it, as
//! etcd's doSerialize does); writes go to the Raft log, where the state machine checks them as
//! etcd does; they are answered once applied. RangeStream is checked here and read in chunks by
//! [`crate::grpc::range_stream`].

use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use actcd_actors::auth::{Access, Need};
use actcd_actors::failpoints;
use actcd_actors::store::mvcc::{txn, validate};
use actcd_proto::errors::EtcdError;
use actcd_proto::etcdserverpb::kv_server::Kv;
use actcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, RangeStreamResponse, TxnRequest, TxnResponse,
};
use actcd_proto::key_range::KeyRange;

use crate::grpc::range_stream::RangeStream;
use crate::grpc::status::to_status;
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
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, request: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let who = self.store.who(&request).await?;
        let req = request.get_ref();
        who.need(Need::Keys(Access::Read, KeyRange::new(&req.key, &req.range_end)))?;
        if !request.get_ref().serializable {
            self.store.linearize().await?;
        }
        let mut resp = self.store.view.range(request.get_ref()).map_err(to_status)?;
        failpoints::hold("grpc::after_range", &request.get_ref().key).await;
        who.still_current(&self.store.view)?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn range_stream(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<BoxStream<RangeStreamResponse>>, Status> {
        // etcd's stream interceptor, then its checks in its order: the request's own, the
        // read barrier, then READ on the whole range, once, before anything is read.
        if self.store.is_learner() {
            return Err(EtcdError::RpcNotSupportedForLearner.status());
        }
        validate::check_range_stream(request.get_ref()).map_err(to_status)?;
        if !request.get_ref().serializable {
            self.store.linearize().await?;
        }
        let who = self.store.who(&request).await?;
        let req = request.get_ref();
        who.need(Need::Keys(Access::Read, KeyRange::new(&req.key, &req.range_end)))?;
        let stream = RangeStream {
            view: self.store.view.clone(),
            identity: self.store.identity.clone(),
            who,
            request: request.into_inner(),
            target_bytes: self.store.max_request_bytes,
        };
        Ok(Response::new(stream.start()))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let who = self.store.who(&request).await?;
        let mut resp = self.store.write(&who, request.into_inner()).await?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let who = self.store.who(&request).await?;
        let mut resp = self.store.write(&who, request.into_inner()).await?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let who = self.store.who(&request).await?;
        let req = request.into_inner();
        let mut resp = if txn::is_read_only(&req) {
            who.read_only_txn(&req)?;
            if !txn::is_serializable(&req) {
                self.store.linearize().await?;
            }
            let resp = self.store.view.read_only_txn(&req, self.store.max_txn_ops).map_err(to_status)?;
            who.still_current(&self.store.view)?;
            resp
        } else {
            self.store.write(&who, req).await?
        };
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    async fn compact(
        &self,
        request: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        let who = self.store.who(&request).await?;
        let mut resp = self.store.write(&who, request.into_inner()).await?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }
}
