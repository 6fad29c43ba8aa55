//! Services registered so that clients get UNIMPLEMENTED (never a hang or an unknown-service
//! error) until they are built: Watch, Lease and Auth each have their own issue.

use actcd_proto::etcdserverpb::{auth_server::Auth, lease_server::Lease, watch_server::Watch};

/// Answers every call with UNIMPLEMENTED (the generated default methods).
pub struct NotYetBuilt;

impl Watch for NotYetBuilt {}
impl Lease for NotYetBuilt {}
impl Auth for NotYetBuilt {}
