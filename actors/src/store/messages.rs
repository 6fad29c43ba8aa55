//! The store family's messages: the writes the gRPC edge and the LeaseActor send the Proposer,
//! and the committed events the state machine publishes. The watch tree subscribes to [`Committed`] as a `Recipient`,
//! so the store never imports the watch tree.

use std::sync::Arc;

use actix::Message;
use tokio::sync::oneshot;

use super::mvcc::command::{Command, CommandResponse};
use super::mvcc::error::StoreError;
use super::mvcc::writer::CommittedEvents;

/// The answer to a write, sent once the write is durable.
pub type WriteReply = oneshot::Sender<Result<CommandResponse, StoreError>>;

/// A write command and where to send its answer.
pub struct Write {
    /// The command.
    pub command: Command,
    /// Receives the answer after the commit (dropped unanswered only if the actor dies).
    pub reply: WriteReply,
}

/// The events of one committed batch, published to the watch tree after the fsync. Shared,
/// not copied: every subscriber gets the same `Arc`.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Committed(pub Arc<CommittedEvents>);
