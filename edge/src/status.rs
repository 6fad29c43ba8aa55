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

#[cfg(test)]
mod tests {
    use actcd_store::auth_store::AuthError;
    use actcd_store::error::ReconfigError;
    use actcd_store::StoreError;
    use tonic::{Code, Status};

    use super::{
        auth_status, grpc_go_text, raw_auth_status, task_status, to_status, unknown_alarm_action, Unsupported,
    };

    /// The code and text a client sees.
    fn seen(status: Status) -> (Code, String) {
        (status.code(), status.message().to_owned())
    }

    /// etcd's codes for its errors (etcdserver/api/v3rpc/rpctypes), and its texts, which are
    /// the store's own words behind "etcdserver: ": a store error mapped to the wrong etcd
    /// error shows as a text that is not its own.
    #[test]
    fn store_errors_get_the_code_and_text_of_the_etcd_error_they_are() {
        use Code::*;
        let named = [
            (StoreError::EmptyKey, InvalidArgument),
            (StoreError::ValueProvided, InvalidArgument),
            (StoreError::LeaseProvided, InvalidArgument),
            (StoreError::KeyNotFound, InvalidArgument),
            (StoreError::TooManyOps, InvalidArgument),
            (StoreError::DuplicateKey, InvalidArgument),
            (StoreError::RequestTooLarge, InvalidArgument),
            (StoreError::Compacted, OutOfRange),
            (StoreError::FutureRevision, OutOfRange),
            (StoreError::LeaseNotFound, NotFound),
            (StoreError::LeaseExists, FailedPrecondition),
            (StoreError::LeaseTtlTooLarge, OutOfRange),
            (StoreError::NoSpace, ResourceExhausted),
            (StoreError::CorruptAlarm, DataLoss),
            (StoreError::NoLeader, Unavailable),
            (StoreError::LeaderChanged, Unavailable),
            (StoreError::Timeout, Unavailable),
            (StoreError::TimeoutDueToLeaderFail, Unavailable),
            (StoreError::TooManyRequests, ResourceExhausted),
            (StoreError::InvalidSortOption, InvalidArgument),
            (StoreError::Auth(AuthError::AuthFailed), InvalidArgument),
            (StoreError::Auth(AuthError::PermissionDenied), PermissionDenied),
            (StoreError::Auth(AuthError::InvalidToken), Unauthenticated),
            (StoreError::Auth(AuthError::UserNotFound), FailedPrecondition),
            (StoreError::Auth(AuthError::OldRevision), InvalidArgument),
            (StoreError::Reconfig(ReconfigError::IdExists), FailedPrecondition),
            (StoreError::Reconfig(ReconfigError::NotFound), NotFound),
            (StoreError::Reconfig(ReconfigError::BadUrls), InvalidArgument),
            (StoreError::Reconfig(ReconfigError::Unhealthy), Unavailable),
            (StoreError::Reconfig(ReconfigError::NotEnoughStarted), Unknown),
        ];
        for (err, code) in named {
            let text = format!("etcdserver: {err}");
            assert_eq!(seen(to_status(err)), (code, text));
        }
    }

    /// What etcd answers with a text of its own, or without a name for the error.
    #[test]
    fn errors_etcd_names_otherwise_keep_their_words() {
        assert_eq!(
            seen(to_status(StoreError::TooManyChanges)),
            (Code::InvalidArgument, "etcdserver: request is too large".into()),
            "too many changes for one revision is a request too large"
        );
        assert_eq!(
            seen(to_status(StoreError::Stopped("shutting down".into()))),
            (Code::Unavailable, "etcdserver: server stopped".into())
        );
        assert_eq!(
            seen(to_status(StoreError::StreamSort)),
            (Code::Unimplemented, "RangeStream does not support custom sort orders".into())
        );
        assert_eq!(
            seen(to_status(StoreError::Storage("disk gone".into()))),
            (Code::Unknown, "storage: disk gone".into()),
            "an error etcd has no name for: Unknown, with its own text"
        );
        let (code, text) = seen(to_status(StoreError::WrongAnswer("Put".into())));
        assert_eq!(code, Code::Internal);
        assert!(text.starts_with("actcd: ") && text.ends_with("Put"), "{text}");
        assert_eq!(
            seen(auth_status(AuthError::NoPasswordUser)),
            (Code::Unknown, "auth: authentication failed, password was given for no password user".into())
        );
        assert_eq!(
            seen(auth_status(AuthError::VerifyOnlyKey)),
            (Code::Unknown, "auth: token signing attempted with verify-only key".into())
        );
    }

    /// Where etcd passes the auth store's error through raw, the code is Unknown and the text
    /// the auth package's; anything else is its permission denied.
    #[test]
    fn raw_auth_errors_keep_the_auth_packages_words() {
        for (err, text) in [
            (AuthError::UserEmpty, "auth: user name is empty"),
            (AuthError::UserNotFound, "auth: user not found"),
            (AuthError::InvalidToken, "auth: invalid auth token"),
            (AuthError::RoleNotFound, "auth: permission denied"),
            (AuthError::PermissionDenied, "auth: permission denied"),
        ] {
            assert_eq!(seen(raw_auth_status(err)), (Code::Unknown, text.into()), "{err:?}");
        }
    }

    #[test]
    fn a_status_reads_as_grpc_go_prints_it() {
        for (status, code) in [
            (Status::invalid_argument("bad"), "InvalidArgument"),
            (Status::permission_denied("bad"), "PermissionDenied"),
            (Status::unauthenticated("bad"), "Unauthenticated"),
            (Status::failed_precondition("bad"), "FailedPrecondition"),
            (Status::unavailable("bad"), "Unavailable"),
            (Status::unknown("bad"), "Unknown"),
        ] {
            assert_eq!(grpc_go_text(&status), format!("rpc error: code = {code} desc = bad"));
        }
    }

    /// actcd's own answers say they are actcd's.
    #[test]
    fn actcds_own_answers_start_with_its_name() {
        let downgrade = Unsupported::Downgrade.status();
        assert_eq!(downgrade.code(), Code::Unimplemented);
        assert!(downgrade.message().starts_with("actcd: downgrade is not supported"), "{downgrade:?}");
        assert_eq!(
            seen(unknown_alarm_action(7)),
            (Code::InvalidArgument, "actcd: unknown alarm action 7".into())
        );
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let failed = runtime.block_on(async { tokio::spawn(async { panic!("boom") }).await.unwrap_err() });
        let (code, text) = seen(task_status(failed));
        assert_eq!(code, Code::Unknown);
        assert!(text.starts_with("actcd: maintenance task failed: ") && text.contains("boom"), "{text}");
    }
}
