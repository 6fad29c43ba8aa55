//! The one place where store errors become gRPC statuses: each store error is named as the
//! etcd error it is, whose code and text `actcd_proto::errors` owns.

use tonic::{Code, Status};

use actcd_actors::store::StoreError;
use actcd_proto::errors::EtcdError;

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
        // etcd answers errors it has no name for with codes.Unknown and the error's own text.
        _ => return Status::new(Code::Unknown, err.to_string()),
    };
    etcd.status()
}

/// A blocking maintenance task that did not finish (it panicked or the runtime is stopping).
pub fn task_status(err: tokio::task::JoinError) -> Status {
    Status::new(Code::Unknown, format!("actcd: maintenance task failed: {err}"))
}
