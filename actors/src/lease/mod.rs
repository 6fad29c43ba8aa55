//! Leases in time: the [`lessor::Lessor`] tracks when each lease expires (one heap for all
//! leases, not a timer per lease) and the [`actor::LeaseActor`] renews them on keep-alives and
//! turns expiries into revoke commands for the leader's Raft route, at a bounded rate. Which leases
//! exist and which keys they hold is the store's business (`store::lease_index`), so grants,
//! revokes and expiries are ordinary durable commands and their deletes ordinary revisions.
//!
//! # Layout
//! - [`lessor`]: deadlines and the expiry heap (a plain struct).
//! - [`actor`]: the LeaseActor, the actix shell around the lessor.
//! - [`keepalive`]: the actor of one LeaseKeepAlive stream.
//! - [`messages`]: the family's messages (renew, remaining TTL, promote, demote).
//! - [`feed`]: the applied lease changes, pushed by the state machine as it applies them.
//! - [`leader`]: what the actor needs from outside: the leader's lessor, the revoker, the
//!   applied leases.

pub mod actor;
pub mod feed;
pub mod keepalive;
pub mod leader;
pub mod lessor;
pub mod messages;
