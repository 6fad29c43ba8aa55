//! The KV service: reads are served from the read view on the caller's task, a linearizable
//! one (etcd's default) once the read barrier says this member applied everything acknowledged
//! before it, and checked before and after (an auth change during the read refuses it, as
//! etcd's doSerialize does); large ones wait for their share of the read budget
//! ([`crate::grpc::read_budget`]), and a Range is sent as it was read
//! ([`crate::grpc::range_answer`]); writes go to the Raft log, where the state machine checks them as
//! etcd does; they are answered once applied. RangeStream is checked here and read in chunks by
//! [`crate::grpc::range_stream`].

use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use actcd_edge::status::to_status;
use actcd_proto::errors::EtcdError;
use actcd_proto::etcdserverpb::{
    request_op, RangeRequest, RangeResponse, RangeStreamResponse, RequestOp, TxnRequest, TxnResponse,
};
use actcd_proto::key_range::KeyRange;
use actcd_raft::failpoints;
use actcd_store::apply::validate;
use actcd_store::auth_store::{Access, Need};
use actcd_store::mvcc::planned_range::{Part, PlannedRange};
use actcd_store::mvcc::txn;

use crate::grpc::range_answer::{AnswerWriter, PIECE_BYTES};
use crate::grpc::range_stream::RangeStream;
use crate::grpc::store_handle::StoreHandle;
use crate::grpc::who::Who;

/// The KV service.
pub struct KvService {
    pub(super) store: StoreHandle,
}

impl KvService {
    /// A KV service over `store`.
    pub fn new(store: StoreHandle) -> Self {
        Self { store }
    }
}

impl KvService {
    /// Range, answered as its encoded bytes ([`crate::grpc::range_answer`]): the message
    /// tonic gets is empty, and the answer rides in its extensions.
    pub(super) async fn range_answer(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let (who, planned) = self.plan_range(&request).await?;
        let req = request.get_ref();
        // A large read waits here for its turn to build, then for budget as it builds.
        let mut reservation = self.store.read_budget.start(planned.estimated_bytes()).await;
        let header = self.store.identity.header(planned.header_revision());
        let mut answer = AnswerWriter::new(planned.estimated_bytes(), &header);
        let mut from = 0;
        let more = loop {
            let part = self
                .store
                .view
                .encode_range_part(&planned, req, from, PIECE_BYTES, &mut |kv| answer.kv(kv))
                .map_err(to_status)?;
            answer.settle(&mut reservation).await;
            match part {
                Part::Next(next) => {
                    from = next;
                    // A connection's serving thread serves other connections too: between
                    // pieces (1 MiB) they get their turn, so a large Range stalls them for one
                    // piece's read, not for the whole answer.
                    tokio::task::yield_now().await;
                }
                Part::Done { more } => break more,
            }
        };
        failpoints::hold("grpc::after_range", &req.key).await;
        who.still_current(&self.store.view)?;
        let encoded = answer.finish(more, planned.count(), &mut reservation).await?;
        let mut response = Response::new(RangeResponse::default());
        response.extensions_mut().insert(encoded);
        Ok(response)
    }

    pub(super) async fn range_chunks(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<BoxStream<RangeStreamResponse>, Status> {
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
            budget: self.store.read_budget.clone(),
        };
        Ok(stream.start())
    }

    /// Range answered as a message (the JSON gateway's), under the same read budget while it
    /// is read.
    pub async fn range_message(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        let (who, planned) = self.plan_range(&request).await?;
        let req = request.get_ref();
        let _held = self.store.read_budget.hold(planned.estimated_bytes()).await;
        let mut resp = self.store.view.range_planned(&planned, req).map_err(to_status)?;
        who.still_current(&self.store.view)?;
        self.store.identity.fill(&mut resp.header);
        Ok(Response::new(resp))
    }

    /// A Range's checks in etcd's order (auth, then the read barrier), then its index pass.
    async fn plan_range(&self, request: &Request<RangeRequest>) -> Result<(Who, PlannedRange), Status> {
        // A learner answers serializable ranges only (etcd's interceptor, before auth; the
        // learner gate let the call through to here).
        if !request.get_ref().serializable && self.store.is_learner() {
            return Err(EtcdError::RpcNotSupportedForLearner.status());
        }
        let who = self.store.who(request).await?;
        let req = request.get_ref();
        who.need(Need::Keys(Access::Read, KeyRange::new(&req.key, &req.range_end)))?;
        if !req.serializable {
            self.store.linearize().await?;
        }
        let planned = self.store.view.plan_range(req).map_err(to_status)?;
        Ok((who, planned))
    }

    /// A read-only txn is served from the read view, as a Range is; any other goes to the log.
    pub(super) async fn run_txn(&self, request: Request<TxnRequest>) -> Result<TxnResponse, Status> {
        let who = self.store.who(&request).await?;
        let req = request.into_inner();
        if !txn::is_read_only(&req) {
            return self.store.write_answered(&who, req).await;
        }
        who.read_only_txn(&req)?;
        if !txn::is_serializable(&req) {
            self.store.linearize().await?;
        }
        let _held = self.store.read_budget.hold(self.txn_estimate(&req)).await;
        let mut resp = self.store.view.read_only_txn(&req, self.store.max_txn_ops).map_err(to_status)?;
        who.still_current(&self.store.view)?;
        self.store.identity.fill(&mut resp.header);
        Ok(resp)
    }

    /// What a read-only txn reserves: its larger branch's top-level ranges, each estimated by
    /// its index pass (a range that fails its checks counts nothing: the txn will fail too).
    fn txn_estimate(&self, req: &TxnRequest) -> u64 {
        let branch = |ops: &[RequestOp]| -> u64 {
            ops.iter()
                .filter_map(|op| match &op.request {
                    Some(request_op::Request::RequestRange(range)) => {
                        self.store.view.estimate_range(range).ok()
                    }
                    _ => None,
                })
                .sum()
        };
        branch(&req.success).max(branch(&req.failure))
    }
}
