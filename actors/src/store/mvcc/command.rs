//! The write seam: every change to the store is a [`Command`] applied in order by the single
//! writer. Revisions are assigned when a command is applied, never before, so a replicated log
//! can later sit in front of [`super::writer::StoreCore::apply`] and feed it the same commands.

use actcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest,
    LeaseGrantResponse, LeaseRevokeRequest, LeaseRevokeResponse, PutRequest, PutResponse, TxnRequest,
    TxnResponse,
};

/// A write request, as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// KV.Put.
    Put(PutRequest),
    /// KV.DeleteRange.
    DeleteRange(DeleteRangeRequest),
    /// KV.Txn with at least one write op (read-only txns are served from the read view).
    Txn(TxnRequest),
    /// KV.Compact.
    Compact(CompactionRequest),
    /// Lease.LeaseGrant, its ID already chosen (non-zero) by the caller.
    LeaseGrant(LeaseGrantRequest),
    /// Lease.LeaseRevoke, or a lease's expiry: its keys are deleted in one revision.
    LeaseRevoke(LeaseRevokeRequest),
}

/// The answer to a [`Command`]; its header carries only the revision (the gRPC edge adds the rest).
#[derive(Debug, Clone, PartialEq)]
pub enum CommandResponse {
    /// Answer to [`Command::Put`].
    Put(PutResponse),
    /// Answer to [`Command::DeleteRange`].
    DeleteRange(DeleteRangeResponse),
    /// Answer to [`Command::Txn`].
    Txn(TxnResponse),
    /// Answer to [`Command::Compact`].
    Compact(CompactionResponse),
    /// Answer to [`Command::LeaseGrant`].
    LeaseGrant(LeaseGrantResponse),
    /// Answer to [`Command::LeaseRevoke`].
    LeaseRevoke(LeaseRevokeResponse),
}
