//! etcd's error texts, all of them in one place. etcd's clients match errors by their text
//! (clientv3's rpctypes turns a status message back into a typed error), so these strings are
//! part of the wire contract as much as the field numbers are.
//!
//! Two families, as in etcd: [`EtcdError`], the errors an RPC fails with (a gRPC code and an
//! `etcdserver: ` text, etcd's api/v3rpc/rpctypes), and the storage layer's own texts (`mvcc: `),
//! which a watch's cancel reason carries and the rpctypes texts embed.

use tonic::{Code, Status};

/// The storage layer's texts (etcd's mvcc package).
pub mod mvcc {
    pub const COMPACTED: &str = "mvcc: required revision has been compacted";
    pub const FUTURE_REVISION: &str = "mvcc: required revision is a future revision";
    pub const NO_SPACE: &str = "mvcc: database space exceeded";
    pub const REVISION_NOT_FOUND: &str = "mvcc: revision not found";
    /// A watch create whose client-chosen id is taken on its stream (a cancel reason).
    pub const DUPLICATE_WATCH_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
    /// A watch create over `[key, range_end)` with `key >= range_end` (a cancel reason).
    pub const EMPTY_WATCHER_RANGE: &str = "mvcc: watcher range is empty";
}

/// The auth store's own texts (etcd's auth package), which reach a client as they are, with
/// codes.Unknown, where etcd returns the auth error without turning it into an rpctypes one:
/// the admin check of Defragment, Hash, HashKV and Snapshot, and Authenticate of a user added
/// without a password.
pub mod auth {
    pub const USER_EMPTY: &str = "auth: user name is empty";
    pub const USER_NOT_FOUND: &str = "auth: user not found";
    pub const PERMISSION_DENIED: &str = "auth: permission denied";
    pub const INVALID_TOKEN: &str = "auth: invalid auth token";
    pub const VERIFY_ONLY_KEY: &str = "auth: token signing attempted with verify-only key";
    pub const NO_PASSWORD_USER: &str = "auth: authentication failed, password was given for no password user";
}

/// The Lock and Election services' own texts (etcd's concurrency package and v3election
/// server): plain Go errors, so they reach a client with codes.Unknown.
pub mod election {
    /// Proclaim by a campaigner whose leadership is gone (its key deleted or re-created).
    pub const NOT_LEADER: &str = "election: not leader";
    /// Leader of an election nobody campaigns in.
    pub const NO_LEADER: &str = "election: no leader";
    /// Proclaim or Resign without a `leader` field.
    pub const MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";
}

/// An error etcd answers an RPC with: always the same gRPC code and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdError {
    EmptyKey,
    KeyNotFound,
    ValueProvided,
    LeaseProvided,
    TooManyOps,
    DuplicateKey,
    Compacted,
    FutureRevision,
    NoSpace,
    LeaseNotFound,
    LeaseExists,
    LeaseTtlTooLarge,
    MemberNotFound,
    MemberNotLearner,
    RequestTooLarge,
    AuthNotEnabled,
    RootUserNotExist,
    RootRoleNotExist,
    UserAlreadyExist,
    UserEmpty,
    UserNotFound,
    RoleAlreadyExist,
    RoleNotFound,
    RoleEmpty,
    AuthFailed,
    PermissionDenied,
    RoleNotGranted,
    PermissionNotGranted,
    PermissionNotGiven,
    InvalidAuthToken,
    InvalidAuthMgmt,
    AuthOldRevision,
    BadLeaderTransferee,
    Stopped,
    NoLeader,
    LeaderChanged,
    Timeout,
    TimeoutDueToLeaderFail,
    TooManyRequests,
    Corrupt,
    InvalidSortOption,
    RpcNotSupportedForLearner,
    RangeStreamCustomSort,
    RangeStreamRevisionFilters,
    MemberIdExists,
    PeerUrlExists,
    MemberBadUrls,
    LearnerNotReady,
    TooManyLearners,
    UnhealthyCluster,
    NotEnoughStartedMembers,
    NotLeader,
    LeaderTransferTimeout,
}

impl EtcdError {
    /// The gRPC code etcd answers with.
    pub fn code(self) -> Code {
        use EtcdError::*;
        match self {
            EmptyKey | KeyNotFound | ValueProvided | LeaseProvided | TooManyOps | DuplicateKey
            | RequestTooLarge | UserEmpty | RoleEmpty | AuthFailed | InvalidAuthMgmt | AuthOldRevision
            | PermissionNotGiven => Code::InvalidArgument,
            RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound | RoleAlreadyExist
            | RoleNotFound | RoleNotGranted | PermissionNotGranted => Code::FailedPrecondition,
            PermissionDenied => Code::PermissionDenied,
            InvalidAuthToken => Code::Unauthenticated,
            Compacted | FutureRevision | LeaseTtlTooLarge => Code::OutOfRange,
            NoSpace => Code::ResourceExhausted,
            LeaseNotFound | MemberNotFound => Code::NotFound,
            LeaseExists | MemberNotLearner | AuthNotEnabled | BadLeaderTransferee => Code::FailedPrecondition,
            Stopped | NoLeader | LeaderChanged | Timeout | TimeoutDueToLeaderFail => Code::Unavailable,
            TooManyRequests => Code::ResourceExhausted,
            Corrupt => Code::DataLoss,
            InvalidSortOption => Code::InvalidArgument,
            // etcd 3.4 and 3.5 send it as Unavailable (3.6 as FailedPrecondition).
            RpcNotSupportedForLearner | UnhealthyCluster => Code::Unavailable,
            MemberIdExists | PeerUrlExists | LearnerNotReady | TooManyLearners | NotLeader => {
                Code::FailedPrecondition
            }
            MemberBadUrls => Code::InvalidArgument,
            // etcd turns these into a client-side EtcdError, not a status: grpc-go sends Unknown.
            NotEnoughStartedMembers | LeaderTransferTimeout => Code::Unknown,
            RangeStreamCustomSort | RangeStreamRevisionFilters => Code::Unimplemented,
        }
    }

    /// The text etcd answers with, word for word.
    pub fn message(self) -> &'static str {
        use EtcdError::*;
        match self {
            EmptyKey => "etcdserver: key is not provided",
            KeyNotFound => "etcdserver: key not found",
            ValueProvided => "etcdserver: value is provided",
            LeaseProvided => "etcdserver: lease is provided",
            TooManyOps => "etcdserver: too many operations in txn request",
            DuplicateKey => "etcdserver: duplicate key given in txn request",
            Compacted => "etcdserver: mvcc: required revision has been compacted",
            FutureRevision => "etcdserver: mvcc: required revision is a future revision",
            NoSpace => "etcdserver: mvcc: database space exceeded",
            LeaseNotFound => "etcdserver: requested lease not found",
            LeaseExists => "etcdserver: lease already exists",
            LeaseTtlTooLarge => "etcdserver: too large lease TTL",
            MemberNotFound => "etcdserver: member not found",
            MemberNotLearner => "etcdserver: can only promote a learner member",
            RequestTooLarge => "etcdserver: request is too large",
            AuthNotEnabled => "etcdserver: authentication is not enabled",
            RootUserNotExist => "etcdserver: root user does not exist",
            RootRoleNotExist => "etcdserver: root user does not have root role",
            UserAlreadyExist => "etcdserver: user name already exists",
            UserEmpty => "etcdserver: user name is empty",
            UserNotFound => "etcdserver: user name not found",
            RoleAlreadyExist => "etcdserver: role name already exists",
            RoleNotFound => "etcdserver: role name not found",
            RoleEmpty => "etcdserver: role name is empty",
            AuthFailed => "etcdserver: authentication failed, invalid user ID or password",
            PermissionDenied => "etcdserver: permission denied",
            RoleNotGranted => "etcdserver: role is not granted to the user",
            PermissionNotGranted => "etcdserver: permission is not granted to the role",
            PermissionNotGiven => "etcdserver: permission not given",
            InvalidAuthToken => "etcdserver: invalid auth token",
            InvalidAuthMgmt => "etcdserver: invalid auth management",
            AuthOldRevision => "etcdserver: revision of auth store is old",
            BadLeaderTransferee => "etcdserver: bad leader transferee",
            Stopped => "etcdserver: server stopped",
            NoLeader => "etcdserver: no leader",
            LeaderChanged => "etcdserver: leader changed",
            Timeout => "etcdserver: request timed out",
            TimeoutDueToLeaderFail => {
                "etcdserver: request timed out, possibly due to previous leader failure"
            }
            TooManyRequests => "etcdserver: too many requests",
            Corrupt => "etcdserver: corrupt cluster",
            InvalidSortOption => "etcdserver: invalid sort option",
            RpcNotSupportedForLearner => "etcdserver: rpc not supported for learner",
            MemberIdExists => "etcdserver: member ID already exist",
            PeerUrlExists => "etcdserver: Peer URLs already exists",
            MemberBadUrls => "etcdserver: given member URLs are invalid",
            LearnerNotReady => "etcdserver: can only promote a learner member which is in sync with leader",
            TooManyLearners => "etcdserver: too many learner members in cluster",
            UnhealthyCluster => "etcdserver: unhealthy cluster",
            NotEnoughStartedMembers => {
                "etcdserver: re-configuration failed due to not enough started members"
            }
            NotLeader => "etcdserver: not leader",
            LeaderTransferTimeout => "etcdserver: request timed out, leader transfer took too long",
            // etcd 3.7's checkRangeStreamRequest words these without the "etcdserver: " prefix.
            RangeStreamCustomSort => "RangeStream does not support custom sort orders",
            RangeStreamRevisionFilters => "RangeStream does not support revision filters",
        }
    }

    /// The status to answer with.
    pub fn status(self) -> Status {
        Status::new(self.code(), self.message())
    }
}

impl From<EtcdError> for Status {
    fn from(e: EtcdError) -> Status {
        e.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rpctypes texts that wrap a storage error are that error's text behind `etcdserver: `.
    #[test]
    fn storage_texts_are_embedded_verbatim() {
        for (rpc, storage) in [
            (EtcdError::Compacted, mvcc::COMPACTED),
            (EtcdError::FutureRevision, mvcc::FUTURE_REVISION),
            (EtcdError::NoSpace, mvcc::NO_SPACE),
        ] {
            assert_eq!(rpc.message().strip_prefix("etcdserver: "), Some(storage));
        }
        let status = EtcdError::LeaseNotFound.status();
        assert_eq!(
            (status.code(), status.message()),
            (Code::NotFound, "etcdserver: requested lease not found")
        );
    }
}
