//! The lease family's messages: what the gRPC edge and the keep-alive streams send the
//! LeaseActor.

use actix::Message;

/// Start tracking a lease (granted, or loaded at start).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Track {
    /// The lease.
    pub id: i64,
    /// Its granted TTL in seconds.
    pub ttl: i64,
}

/// A keep-alive; answers the TTL, 0 if the lease is unknown or expired.
#[derive(Message)]
#[rtype(result = "i64")]
pub struct Renew(pub i64);

/// Remaining and granted TTL of a lease, if it is alive.
#[derive(Message)]
#[rtype(result = "Option<(i64, i64)>")]
pub struct Remaining(pub i64);

/// The lease was revoked by a client.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Forget(pub i64);
