//! The one place where store errors become gRPC statuses, with etcd's codes and message texts
//! (etcd's clients match errors by their text).

use tonic::{Code, Status};

use actcd_actors::store::StoreError;

/// Maps a store error to the status etcd answers with.
pub fn to_status(err: StoreError) -> Status {
    let (code, message) = match &err {
        StoreError::EmptyKey => (Code::InvalidArgument, "etcdserver: key is not provided"),
        StoreError::ValueProvided => (Code::InvalidArgument, "etcdserver: value is provided"),
        StoreError::LeaseProvided => (Code::InvalidArgument, "etcdserver: lease is provided"),
        StoreError::KeyNotFound => (Code::InvalidArgument, "etcdserver: key not found"),
        StoreError::TooManyOps => (Code::InvalidArgument, "etcdserver: too many operations in txn request"),
        StoreError::DuplicateKey => (Code::InvalidArgument, "etcdserver: duplicate key given in txn request"),
        // A request whose changes do not fit one revision is too large by another measure.
        StoreError::RequestTooLarge | StoreError::TooManyChanges => {
            (Code::InvalidArgument, "etcdserver: request is too large")
        }
        StoreError::Compacted => (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted"),
        StoreError::FutureRevision => {
            (Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision")
        }
        StoreError::LeaseNotFound => (Code::NotFound, "etcdserver: requested lease not found"),
        StoreError::LeaseExists => (Code::FailedPrecondition, "etcdserver: lease already exists"),
        StoreError::LeaseTtlTooLarge => (Code::OutOfRange, "etcdserver: too large lease TTL"),
        StoreError::NoSpace => (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded"),
        StoreError::CorruptAlarm => (Code::DataLoss, "etcdserver: corrupt cluster"),
        StoreError::Stopped(_) => (Code::Unavailable, "etcdserver: server stopped"),
        // etcd answers errors it has no name for with codes.Unknown and the error's own text.
        StoreError::Storage(_) | StoreError::Corrupt(_) => {
            return Status::new(Code::Unknown, err.to_string())
        }
        _ => return Status::new(Code::Unknown, err.to_string()),
    };
    Status::new(code, message)
}

/// A blocking maintenance task that did not finish (it panicked or the runtime is stopping).
pub fn task_status(err: tokio::task::JoinError) -> Status {
    Status::new(Code::Unknown, format!("actcd: maintenance task failed: {err}"))
}
