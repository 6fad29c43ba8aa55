//! The handles every service (and the metrics URLs' health probe) reaches the store through:
//! the read view for reads, the StoreActor for writes, the alarms that refuse some writes, and
//! the engine for maintenance below the store. A write is answered once its group commit is
//! durable; one that finds the store over its quota raises NOSPACE on the way back.

use std::sync::Arc;

use actix::Addr;
use tokio::sync::oneshot;
use tonic::Status;

use actcd_actors::identity::Identity;
use actcd_actors::store::actor::StoreActor;
use actcd_actors::store::messages::Write;
use actcd_actors::store::mvcc::alarm::Alarms;
use actcd_actors::store::{Command, CommandResponse, ReadView, RocksEngine, StoreError};
use actcd_proto::etcdserverpb::AlarmType;

use crate::grpc::status::to_status;

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
}
