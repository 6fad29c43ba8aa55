//! The handles every service (and the metrics URLs' health probe) reaches the store through:
//! the read view for reads, the StoreActor for writes, and the engine for maintenance below the
//! store. A write is a typed request ([`WriteRequest`]): the writer checks it, applies it and
//! answers once its group commit is durable, so a service only decodes, submits and encodes.

use actix::Addr;
use tokio::sync::oneshot;
use tonic::Status;

use actcd_actors::identity::Identity;
use actcd_actors::store::actor::StoreActor;
use actcd_actors::store::messages::Write;
use actcd_actors::store::mvcc::command::WriteRequest;
use actcd_actors::store::{ReadView, RocksEngine, StoreError};

use crate::grpc::status::to_status;

/// The handles a service needs to reach the store.
#[derive(Clone)]
pub struct StoreHandle {
    /// Concurrent reads.
    pub view: ReadView<RocksEngine>,
    /// The single writer. Its mailbox is bounded: a full one makes `write` wait.
    pub writer: Addr<StoreActor<RocksEngine>>,
    /// Header identity.
    pub identity: Identity,
    /// `--max-txn-ops`, for read-only txns (the writer checks the others).
    pub max_txn_ops: usize,
    /// The engine itself, for maintenance that works below the store (checkpoints,
    /// defragmentation, hashes).
    pub engine: RocksEngine,
}

impl StoreHandle {
    /// Submits `request` to the writer and waits for its durable answer.
    pub async fn write<R: WriteRequest>(&self, request: R) -> Result<R::Response, Status> {
        self.write_raw(request).await.map_err(to_status)
    }

    /// [`StoreHandle::write`], with the store's own error.
    pub async fn write_raw<R: WriteRequest>(&self, request: R) -> Result<R::Response, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Write { command: request.into_command(), reply })
            .await
            .map_err(|_| StoreError::Stopped("writer is gone".into()))?;
        let answer = answer.await.map_err(|_| StoreError::Stopped("writer dropped the request".into()))?;
        R::response(answer?)
    }
}
