//! The handles every service (and the metrics URLs' health probe) reaches the store through:
//! the read view for reads, the Proposer for writes, and the engine for maintenance below the
//! store. A write is a typed request ([`WriteRequest`]): it is proposed through the Raft log,
//! and the state machine checks it, applies it and answers once its entry is committed and
//! applied, so a service only decodes, submits and encodes.

use tonic::{Request, Status};

use actcd_actors::identity::Identity;
use actcd_edge::status::to_status;
use actcd_proto::etcdserverpb::ResponseHeader;
use actcd_raft::proposer::Proposer;
use actcd_raft::read_barrier::ReadBarrier;
use actcd_raft::route::Route;
use actcd_raft::state_machine::CoreHandle;
use actcd_store::apply::command::WriteRequest;
use actcd_store::{Command, ReadView, RocksEngine, StoreError};

use crate::grpc::read_budget::ReadBudget;
use crate::grpc::tokens::Tokens;
use crate::grpc::who::Who;

/// The handles a service needs to reach the store.
#[derive(Clone)]
pub struct StoreHandle {
    /// Concurrent reads.
    pub view: ReadView<RocksEngine>,
    /// Where writes enter the log. Its channel is bounded: a full one makes `write` wait.
    pub writer: Proposer,
    /// The way to the leader, and openraft's state (leader, term, indexes) for Status.
    pub route: Route,
    /// Where linearizable reads wait until this member applied what the cluster committed.
    pub reads: ReadBarrier,
    /// The store core, for the writer-owned lease records (keys per lease, the lease list).
    pub core: CoreHandle,
    /// Header identity.
    pub identity: Identity,
    /// `--max-txn-ops`, for read-only txns (the writer checks the others).
    pub max_txn_ops: usize,
    /// `--max-request-bytes`, the size RangeStream's chunks aim at (the writer checks
    /// requests against it on its own).
    pub max_request_bytes: usize,
    /// What large reads' answers may hold together (`--read-budget-bytes`).
    pub read_budget: ReadBudget,
    /// The tokens `--auth-token` chose.
    pub tokens: std::sync::Arc<Tokens>,
    /// The engine itself, for maintenance that works below the store (checkpoints,
    /// defragmentation, hashes).
    pub engine: RocksEngine,
}

impl StoreHandle {
    /// Who sent `request` (see [`Who`]). A simple token this member does not know may come
    /// from an Authenticate another member proposed that this one has not applied yet: after
    /// the read barrier it has (etcd waits for the index in the token's name instead).
    pub async fn who<T>(&self, request: &Request<T>) -> Result<Who, Status> {
        let who = Who::of(&self.view, &self.tokens, request)?;
        if !who.bad_token() {
            return Ok(who);
        }
        self.linearize().await?;
        Who::of(&self.view, &self.tokens, request)
    }

    /// Submits `request` from `who` to the writer and waits for its durable answer.
    pub async fn write<R: WriteRequest>(&self, who: &Who, request: R) -> Result<R::Response, Status> {
        self.write_raw(who, request).await.map_err(to_status)
    }

    /// [`StoreHandle::write`] from the request's sender, answered with the member's full header.
    pub async fn submit<R: WriteRequest>(&self, request: Request<R>) -> Result<R::Response, Status> {
        let who = self.who(&request).await?;
        self.write_answered(&who, request.into_inner()).await
    }

    /// [`StoreHandle::write`], answered with the member's full header.
    pub async fn write_answered<R: WriteRequest>(
        &self,
        who: &Who,
        request: R,
    ) -> Result<R::Response, Status> {
        let mut answer = self.write(who, request).await?;
        self.identity.fill(R::header_mut(&mut answer));
        Ok(answer)
    }

    /// The member's header at the read view's revision.
    pub fn header(&self) -> Option<ResponseHeader> {
        self.identity.header(self.view.revision())
    }

    /// Waits until a linearizable read may be answered from this member's read view.
    pub async fn linearize(&self) -> Result<(), Status> {
        self.reads.wait().await.map_err(to_status)
    }

    /// [`StoreHandle::write`], with the store's own error. The edge checks the sender's
    /// permissions first, so a refused write never reaches the log.
    pub async fn write_raw<R: WriteRequest>(&self, who: &Who, request: R) -> Result<R::Response, StoreError> {
        let command = who.command(request.into_command(), &|id| self.lease_keys(id))?;
        self.propose::<R>(command).await
    }

    /// Proposes `command`, checked and sent as `R`, and waits for its durable answer.
    pub async fn propose<R: WriteRequest>(&self, command: Command) -> Result<R::Response, StoreError> {
        R::response(self.writer.write_via(command, crate::transport::serving::relay()).await?)
    }

    /// Whether this member is a learner (a non-voter), as its Raft membership says.
    pub fn is_learner(&self) -> bool {
        self.identity.is_learner()
    }

    /// The keys lease `id` holds (none for an unknown lease).
    pub fn lease_keys(&self, id: i64) -> Vec<Box<[u8]>> {
        self.core.lock().ok().and_then(|core| core.lease_keys(id)).unwrap_or_default()
    }
}
