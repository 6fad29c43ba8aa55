//! Services registered so that clients get UNIMPLEMENTED (never a hang or an unknown-service
//! error) until they are built: Lease has its own issue.

use actcd_proto::etcdserverpb::lease_server::Lease;

/// Answers every call with UNIMPLEMENTED (the generated default methods).
pub struct NotYetBuilt;

impl Lease for NotYetBuilt {}
