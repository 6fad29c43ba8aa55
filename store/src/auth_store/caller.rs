//! Who sent a write, as the log carries it: etcd's `RequestHeader` (the user name and the auth
//! revision the gRPC edge saw when it checked the token), so that apply checks the permission
//! again against the auth state of that moment in the log (etcd's apply-time check) and refuses
//! a command checked against an older auth state.

/// The sender of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A client: the user its token or certificate named (empty without one) and the auth
    /// revision the edge checked it at (0 while auth was disabled there).
    User {
        /// The user name.
        name: String,
        /// The auth store's revision when the edge checked the request.
        auth_revision: u64,
    },
    /// This member's own work, on the leader: its lessor revoking an expired lease, its
    /// corruption check raising an alarm. No user, never refused by auth.
    Member,
}

impl Caller {
    /// A client checked while auth was disabled: the check is redone at apply, where auth may
    /// have been enabled since.
    pub fn anonymous() -> Self {
        Caller::User { name: String::new(), auth_revision: 0 }
    }
}

/// [`Caller`] on the wire: the field numbers of etcd's `RequestHeader` (raft_internal.proto),
/// and one of actcd's own for the member's own work.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RequestHeader {
    #[prost(string, tag = "2")]
    pub username: String,
    #[prost(uint64, tag = "3")]
    pub auth_revision: u64,
    #[prost(bool, tag = "100")]
    pub lessor: bool,
}

impl From<&Caller> for RequestHeader {
    fn from(caller: &Caller) -> Self {
        match caller {
            Caller::User { name, auth_revision } => {
                RequestHeader { username: name.clone(), auth_revision: *auth_revision, lessor: false }
            }
            Caller::Member => RequestHeader { lessor: true, ..Default::default() },
        }
    }
}

impl From<RequestHeader> for Caller {
    fn from(header: RequestHeader) -> Self {
        if header.lessor {
            Caller::Member
        } else {
            Caller::User { name: header.username, auth_revision: header.auth_revision }
        }
    }
}
