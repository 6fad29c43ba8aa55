//! The one place where errors become gRPC statuses: each store error is named as the etcd error
//! it is, whose code and text `actcd_proto::errors` owns; and actcd's own answers, for what etcd
//! does and actcd does not, each text starting "actcd:" so that no one takes it for etcd's.

use tonic::{Code, Status};

use actcd_proto::errors::EtcdError;
use actcd_store::auth_store::AuthError;
use actcd_store::error::ReconfigError;
use actcd_store::StoreError;

/// Maps a store error to the status etcd answers with.
pub fn to_status(err: StoreError) -> Status {
    let etcd = match &err {
        StoreError::EmptyKey => EtcdError::EmptyKey,
        StoreError::ValueProvided => EtcdError::ValueProvided,
        StoreError::LeaseProvided => EtcdError::LeaseProvided,
        StoreError::KeyNotFound => EtcdError::KeyNotFound,
        StoreError::TooManyOps => EtcdError::TooManyOps,
        StoreError::DuplicateKey => EtcdError::DuplicateKey,
        // A request whose changes do not fit one revision is too large by another measure.
        StoreError::RequestTooLarge | StoreError::TooManyChanges => EtcdError::RequestTooLarge,
        StoreError::Compacted => EtcdError::Compacted,
        StoreError::FutureRevision => EtcdError::FutureRevision,
        StoreError::LeaseNotFound => EtcdError::LeaseNotFound,
        StoreError::LeaseExists => EtcdError::LeaseExists,
        StoreError::LeaseTtlTooLarge => EtcdError::LeaseTtlTooLarge,
        StoreError::NoSpace => EtcdError::NoSpace,
        StoreError::CorruptAlarm => EtcdError::Corrupt,
        StoreError::Stopped(_) => EtcdError::Stopped,
        StoreError::NoLeader => EtcdError::NoLeader,
        StoreError::LeaderChanged => EtcdError::LeaderChanged,
        StoreError::Timeout => EtcdError::Timeout,
        StoreError::TimeoutDueToLeaderFail => EtcdError::TimeoutDueToLeaderFail,
        StoreError::TooManyRequests => EtcdError::TooManyRequests,
        StoreError::InvalidSortOption => EtcdError::InvalidSortOption,
        StoreError::StreamSort => EtcdError::RangeStreamCustomSort,
        StoreError::StreamRevisionFilters => EtcdError::RangeStreamRevisionFilters,
        StoreError::Reconfig(refused) => reconfig(*refused),
        StoreError::Auth(auth) => return auth_status(*auth),
        // A bug in actcd, not a client's doing.
        StoreError::WrongAnswer(_) => return Status::internal(err.to_string()),
        // etcd answers errors it has no name for with codes.Unknown and the error's own text.
        _ => return Status::new(Code::Unknown, err.to_string()),
    };
    etcd.status()
}

/// An auth refusal as etcd answers it.
pub fn auth_status(err: AuthError) -> Status {
    let etcd = match err {
        AuthError::RootUserNotExist => EtcdError::RootUserNotExist,
        AuthError::RootRoleNotExist => EtcdError::RootRoleNotExist,
        AuthError::UserAlreadyExist => EtcdError::UserAlreadyExist,
        AuthError::UserEmpty => EtcdError::UserEmpty,
        AuthError::UserNotFound => EtcdError::UserNotFound,
        AuthError::RoleAlreadyExist => EtcdError::RoleAlreadyExist,
        AuthError::RoleNotFound => EtcdError::RoleNotFound,
        AuthError::RoleEmpty => EtcdError::RoleEmpty,
        AuthError::AuthFailed => EtcdError::AuthFailed,
        AuthError::PermissionDenied => EtcdError::PermissionDenied,
        AuthError::RoleNotGranted => EtcdError::RoleNotGranted,
        AuthError::PermissionNotGranted => EtcdError::PermissionNotGranted,
        AuthError::PermissionNotGiven => EtcdError::PermissionNotGiven,
        AuthError::NotEnabled => EtcdError::AuthNotEnabled,
        AuthError::InvalidToken => EtcdError::InvalidAuthToken,
        AuthError::InvalidAuthMgmt => EtcdError::InvalidAuthMgmt,
        AuthError::OldRevision => EtcdError::AuthOldRevision,
        // etcd has no rpctypes error for it: the auth store's text, with codes.Unknown.
        AuthError::NoPasswordUser => {
            return Status::new(Code::Unknown, actcd_proto::errors::auth::NO_PASSWORD_USER)
        }
        AuthError::VerifyOnlyKey => {
            return Status::new(Code::Unknown, actcd_proto::errors::auth::VERIFY_ONLY_KEY)
        }
    };
    etcd.status()
}

/// An auth refusal as etcd answers it where it passes the auth store's error through raw:
/// codes.Unknown with the auth package's text (see `actcd_proto::errors::auth`).
pub fn raw_auth_status(err: AuthError) -> Status {
    use actcd_proto::errors::auth;
    let text = match err {
        AuthError::UserEmpty => auth::USER_EMPTY,
        AuthError::UserNotFound => auth::USER_NOT_FOUND,
        AuthError::InvalidToken => auth::INVALID_TOKEN,
        _ => auth::PERMISSION_DENIED,
    };
    Status::new(Code::Unknown, text)
}

/// The text grpc-go gives a status (`err.Error()`), which etcd puts in a refused watch's cancel
/// reason.
pub fn grpc_go_text(status: &Status) -> String {
    let code = match status.code() {
        Code::InvalidArgument => "InvalidArgument",
        Code::PermissionDenied => "PermissionDenied",
        Code::Unauthenticated => "Unauthenticated",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Unavailable => "Unavailable",
        _ => "Unknown",
    };
    format!("rpc error: code = {code} desc = {}", status.message())
}

/// A blocking maintenance task that did not finish (it panicked or the runtime is stopping).
pub fn task_status(err: tokio::task::JoinError) -> Status {
    Status::new(Code::Unknown, format!("actcd: maintenance task failed: {err}"))
}

/// A snapshot stream that could not be made to its end.
pub fn snapshot_failed(err: impl std::fmt::Display) -> Status {
    Status::new(Code::Unknown, format!("actcd: snapshot failed: {err}"))
}

/// etcd's error for a refused membership change or leader move.
fn reconfig(refused: ReconfigError) -> EtcdError {
    match refused {
        ReconfigError::IdExists => EtcdError::MemberIdExists,
        ReconfigError::PeerUrlExists => EtcdError::PeerUrlExists,
        ReconfigError::NotFound => EtcdError::MemberNotFound,
        ReconfigError::BadUrls => EtcdError::MemberBadUrls,
        ReconfigError::NotLearner => EtcdError::MemberNotLearner,
        ReconfigError::LearnerNotReady => EtcdError::LearnerNotReady,
        ReconfigError::TooManyLearners => EtcdError::TooManyLearners,
        ReconfigError::Unhealthy => EtcdError::UnhealthyCluster,
        ReconfigError::NotEnoughStarted => EtcdError::NotEnoughStartedMembers,
        ReconfigError::NotLeader => EtcdError::NotLeader,
        ReconfigError::BadTransferee => EtcdError::BadLeaderTransferee,
        ReconfigError::TransferTimeout => EtcdError::LeaderTransferTimeout,
        // Only members publish records; a client never sees this.
        ReconfigError::NotOwnRecord => EtcdError::Stopped,
    }
}

/// An alarm action outside etcd's three.
pub fn unknown_alarm_action(action: i32) -> Status {
    Status::invalid_argument(format!("actcd: unknown alarm action {action}"))
}

/// What etcd does and actcd does not (yet).
#[derive(Debug, Clone, Copy)]
pub enum Unsupported {
    /// Downgrade: a single member has no cluster version to lower.
    Downgrade,
}

impl Unsupported {
    /// codes.Unimplemented, with a text that says what is missing.
    pub fn status(self) -> Status {
        Status::unimplemented(match self {
            Unsupported::Downgrade => {
                "actcd: downgrade is not supported: a single actcd member has no cluster version to lower"
                    .to_owned()
            }
        })
    }
}
