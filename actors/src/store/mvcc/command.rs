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
    ($($(#[$doc:meta])* $variant:ident($request:ty) -> $response:ty,)*) => {
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

commands! {
    /// KV.Put.
    Put(PutRequest) -> PutResponse,
    /// KV.DeleteRange.
    DeleteRange(DeleteRangeRequest) -> DeleteRangeResponse,
    /// KV.Txn with at least one write op (read-only txns are served from the read view).
    Txn(TxnRequest) -> TxnResponse,
    /// KV.Compact.
    Compact(CompactionRequest) -> CompactionResponse,
    /// Lease.LeaseGrant, its ID already chosen (non-zero) by the caller.
    LeaseGrant(LeaseGrantRequest) -> LeaseGrantResponse,
    /// Lease.LeaseRevoke, or a lease's expiry: its keys are deleted in one revision.
    LeaseRevoke(LeaseRevokeRequest) -> LeaseRevokeResponse,
    /// Maintenance.Alarm: raise or clear an alarm (a GET is served from the read view).
    Alarm(AlarmRequest) -> AlarmResponse,
}
