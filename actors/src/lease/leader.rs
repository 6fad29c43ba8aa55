//! What the LeaseActor needs from outside the lease family: the leader, for the keep-alives
//! and time-to-live questions a follower cannot answer, the way expired leases are revoked,
//! and the applied leases, which a lessor lists when it starts or lost track of the changes
//! (see [`super::feed`]).

use futures::future::BoxFuture;

use actcd_store::StoreError;

/// The way to the leader's lessor (the peer transport implements it).
pub trait LeaseLeader: Send + Sync + 'static {
    /// Renews lease `id` on the leader: its TTL, 0 if unknown or expired.
    fn renew(&self, id: i64) -> BoxFuture<'static, Result<i64, StoreError>>;

    /// Lease `id`'s remaining and granted TTL on the leader.
    fn remaining(&self, id: i64) -> BoxFuture<'static, Result<Option<(i64, i64)>, StoreError>>;
}

/// Where expired leases are revoked: by the leader only, which confirms it still leads (a
/// read-index round) before it proposes them, so that a deposed leader revokes nothing. Answers
/// each revoke's outcome, or why none was proposed (the Raft route implements it).
pub trait LeaseRevoker: Send + Sync + 'static {
    /// Revokes the leases `ids`, which expired on this member's lessor.
    fn revoke_expired(
        &self,
        ids: Vec<i64>,
    ) -> BoxFuture<'static, Result<Vec<Result<(), StoreError>>, StoreError>>;
}

/// The leases as applied (the store core implements it).
pub trait LeaseSource: Send + 'static {
    /// Every lease and its TTL.
    fn list(&mut self) -> Result<Vec<(i64, i64)>, StoreError>;
}
