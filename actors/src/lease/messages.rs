//! The lease family's messages: what the gRPC edge, the keep-alive streams and the member's
//! leadership send the LeaseActor.

use actix::Message;

use actcd_store::StoreError;

/// A keep-alive; answers the TTL, 0 if the lease is unknown or expired. Not on the leader, it
/// is forwarded there, unless it was forwarded already (`forwarded`): then it fails with
/// "leader changed" rather than travel on.
#[derive(Message)]
#[rtype(result = "Result<i64, StoreError>")]
pub struct Renew {
    /// The lease.
    pub id: i64,
    /// Sent by another member.
    pub forwarded: bool,
}

/// Remaining and granted TTL of a lease, if it is alive; asked of the leader as [`Renew`] is.
#[derive(Message)]
#[rtype(result = "Result<Option<(i64, i64)>, StoreError>")]
pub struct Remaining {
    /// The lease.
    pub id: i64,
    /// Sent by another member.
    pub forwarded: bool,
}

/// This member leads, and has applied everything committed before its term: its lessor
/// becomes primary and gives every lease its full TTL.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Promote;

/// This member no longer leads: its lessor stops expiring leases.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Demote;
