//! The write seam: every change to the store is a [`Command`] applied in order by the single
//! writer. Revisions are assigned when a command is applied, never before, so a replicated log
//! can sit in front of [`super::writer::StoreCore::apply`] and feed it the same commands.
//!
//! Callers do not build commands: they submit a request through [`WriteRequest`], which names
//! the response type each request gets back. The one place that turns a [`CommandResponse`]
//! back into that type is here, generated for each pair by the same macro that puts the request
//! in its command, so a service never matches on a response kind.

use actcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    PutRequest, PutResponse, TxnRequest, TxnResponse,
};
use prost::Message;

use super::error::StoreError;

/// A request the writer applies, and the response it answers with.
pub trait WriteRequest: Sized {
    /// What the writer answers.
    type Response;
    /// The command that carries this request.
    fn into_command(self) -> Command;
    /// The typed answer out of the writer's answer to [`WriteRequest::into_command`].
    fn response(answer: CommandResponse) -> Result<Self::Response, StoreError>;
}

macro_rules! commands {
    ($($(#[$doc:meta])* $variant:ident($request:ty) -> $response:ty = $tag:literal,)*) => {
        /// A write request, as the client sent it (and, for a lease grant, with its ID chosen).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Command {
            $($(#[$doc])* $variant($request),)*
        }

        /// The answer to a [`Command`]; its header carries only the revision (the gRPC edge
        /// adds the rest).
        #[derive(Debug, Clone, PartialEq)]
        pub enum CommandResponse {
            $(#[doc = concat!("Answer to [`Command::", stringify!($variant), "`].")] $variant($response),)*
        }

        impl Command {
            /// The size of the request as the client marshalled it, for `--max-request-bytes`.
            pub fn encoded_len(&self) -> usize {
                match self {
                    $(Command::$variant(req) => req.encoded_len(),)*
                }
            }

            /// The command as it travels in a log entry: its tag, then the request in etcd's
            /// protobuf encoding (so the log holds exactly what the client sent).
            pub fn encode(&self) -> Vec<u8> {
                match self {
                    $(Command::$variant(req) => tagged($tag, req),)*
                }
            }

            /// The command [`Command::encode`] wrote.
            pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
                let (tag, body) = untag(bytes)?;
                match tag {
                    $($tag => Ok(Command::$variant(decode_body(body)?)),)*
                    other => Err(StoreError::Corrupt(format!("unknown command tag {other}"))),
                }
            }
        }

        impl CommandResponse {
            /// The answer as it travels between members: its command's tag, then the response
            /// in etcd's protobuf encoding.
            pub fn encode(&self) -> Vec<u8> {
                match self {
                    $(CommandResponse::$variant(resp) => tagged($tag, resp),)*
                }
            }

            /// The answer [`CommandResponse::encode`] wrote.
            pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
                let (tag, body) = untag(bytes)?;
                match tag {
                    $($tag => Ok(CommandResponse::$variant(decode_body(body)?)),)*
                    other => Err(StoreError::Corrupt(format!("unknown response tag {other}"))),
                }
            }
        }

        $(impl WriteRequest for $request {
            type Response = $response;

            fn into_command(self) -> Command {
                Command::$variant(self)
            }

            fn response(answer: CommandResponse) -> Result<$response, StoreError> {
                match answer {
                    CommandResponse::$variant(resp) => Ok(resp),
                    #[allow(unreachable_patterns)]
                    other => Err(StoreError::WrongAnswer(format!("{other:?}"))),
                }
            }
        })*
    };
}

// The tags are written into the Raft log: never reuse or renumber one.
commands! {
    /// KV.Put.
    Put(PutRequest) -> PutResponse = 1,
    /// KV.DeleteRange.
    DeleteRange(DeleteRangeRequest) -> DeleteRangeResponse = 2,
    /// KV.Txn with at least one write op (read-only txns are served from the read view).
    Txn(TxnRequest) -> TxnResponse = 3,
    /// KV.Compact.
    Compact(CompactionRequest) -> CompactionResponse = 4,
    /// Lease.LeaseGrant, its ID already chosen (non-zero) by the caller.
    LeaseGrant(LeaseGrantRequest) -> LeaseGrantResponse = 5,
    /// Lease.LeaseRevoke, or a lease's expiry: its keys are deleted in one revision.
    LeaseRevoke(LeaseRevokeRequest) -> LeaseRevokeResponse = 6,
    /// Maintenance.Alarm: raise or clear an alarm (a GET is served from the read view).
    Alarm(AlarmRequest) -> AlarmResponse = 7,
}

fn tagged(tag: u8, message: &impl Message) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + message.encoded_len());
    bytes.push(tag);
    // Writing into a Vec cannot run out of room.
    let _ = message.encode(&mut bytes);
    bytes
}

fn untag(bytes: &[u8]) -> Result<(u8, &[u8]), StoreError> {
    bytes
        .split_first()
        .map(|(tag, body)| (*tag, body))
        .ok_or_else(|| StoreError::Corrupt("empty command".into()))
}

fn decode_body<M: Message + Default>(body: &[u8]) -> Result<M, StoreError> {
    M::decode(body).map_err(|e| StoreError::Corrupt(format!("undecodable command: {e}")))
}
