//! The store's typed errors. The gRPC edge maps each variant to etcd's code and message text in
//! one place (`edge/src/status.rs`, with the texts of `actcd_proto::errors`), so the store never speaks gRPC.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Everything a store operation can refuse or fail with.
#[derive(Debug, Error, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StoreError {
    /// A request, compare or op named no key.
    #[error("key is not provided")]
    EmptyKey,
    /// `ignore_value` was set together with a value.
    #[error("value is provided")]
    ValueProvided,
    /// `ignore_lease` was set together with a lease.
    #[error("lease is provided")]
    LeaseProvided,
    /// `ignore_value`/`ignore_lease` on a key that does not exist, or an empty txn op.
    #[error("key not found")]
    KeyNotFound,
    /// A txn has more compares or ops at one level than `--max-txn-ops`.
    #[error("too many operations in txn request")]
    TooManyOps,
    /// One txn branch writes the same key twice (or puts inside a range it deletes).
    #[error("duplicate key given in txn request")]
    DuplicateKey,
    /// The marshalled request is larger than `--max-request-bytes`.
    #[error("request is too large")]
    RequestTooLarge,
    /// The requested revision is older than the last compaction.
    #[error("{}", actcd_proto::errors::mvcc::COMPACTED)]
    Compacted,
    /// The requested revision is newer than the store's revision.
    #[error("{}", actcd_proto::errors::mvcc::FUTURE_REVISION)]
    FutureRevision,
    /// A put or revoke named a lease that does not exist.
    #[error("requested lease not found")]
    LeaseNotFound,
    /// A grant named an ID that is already a lease.
    #[error("lease already exists")]
    LeaseExists,
    /// A grant asked for more than the longest TTL.
    #[error("too large lease TTL")]
    LeaseTtlTooLarge,
    /// The database is over `--quota-backend-bytes`.
    #[error("{}", actcd_proto::errors::mvcc::NO_SPACE)]
    NoSpace,
    /// A CORRUPT alarm is raised: no writes until it is cleared.
    #[error("corrupt cluster")]
    CorruptAlarm,
    /// A single revision would need more sub-revisions than the packed revision format holds.
    #[error("too many changes in one revision")]
    TooManyChanges,
    /// The writer is gone or has stopped after a failed write (fail-stop): no more writes are taken.
    #[error("store stopped: {0}")]
    Stopped(String),
    /// This member knows no leader to commit a write through.
    #[error("no leader")]
    NoLeader,
    /// The leader a write was proposed to lost its leadership before the write committed.
    #[error("leader changed")]
    LeaderChanged,
    /// A write was not committed in time (no leader was found, or the leader did not answer).
    #[error("request timed out")]
    Timeout,
    /// The leader a follower forwarded a write to went away before answering: the write may
    /// or may not have committed.
    #[error("request timed out, possibly due to previous leader failure")]
    TimeoutDueToLeaderFail,
    /// The member applies too far behind what is committed to take more writes.
    #[error("too many requests")]
    TooManyRequests,
    /// The auth store refused the request.
    #[error("{0}")]
    Auth(#[from] crate::auth_store::AuthError),
    /// The storage engine failed.
    #[error("storage: {0}")]
    Storage(String),
    /// A stored record could not be decoded: the data dir is damaged or of another format.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The data dir belongs to another cluster or member than the flags name.
    #[error("the data dir belongs to {stored}, not {given}")]
    OtherMember {
        /// The ids the data dir holds.
        stored: String,
        /// The ids the flags give.
        given: String,
    },
    /// The writer answered a command with another command's response: a bug in actcd, never
    /// a client's doing.
    #[error("actcd: the writer answered with the wrong response kind: {0}")]
    WrongAnswer(String),
    /// A sort order or target outside etcd's enums (checked by RangeStream, as etcd 3.5 on
    /// checks every range; unary Range keeps etcd 3.4's leniency).
    #[error("invalid sort option")]
    InvalidSortOption,
    /// RangeStream was asked for an order other than by key, ascending.
    #[error("RangeStream does not support custom sort orders")]
    StreamSort,
    /// A membership change or leader move refused by etcd's rules.
    #[error("{0}")]
    Reconfig(ReconfigError),
    /// RangeStream was asked to filter by mod or create revision.
    #[error("RangeStream does not support revision filters")]
    StreamRevisionFilters,
}

/// Why a membership change or a leader move is refused (`actcd_raft::reconfig` checks them):
/// each is one of etcd's errors, mapped to its text at the edge. A variant's text is etcd's
/// words for it, which say what it is.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ReconfigError {
    #[error("member ID already exist")]
    IdExists,
    #[error("Peer URLs already exists")]
    PeerUrlExists,
    #[error("member not found")]
    NotFound,
    #[error("given member URLs are invalid")]
    BadUrls,
    #[error("can only promote a learner member")]
    NotLearner,
    #[error("can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("too many learner members in cluster")]
    TooManyLearners,
    #[error("unhealthy cluster")]
    Unhealthy,
    #[error("re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("not leader")]
    NotLeader,
    #[error("bad leader transferee")]
    BadTransferee,
    #[error("request timed out, leader transfer took too long")]
    TransferTimeout,
    /// A member published a record for another member, or renamed itself.
    #[error("a member may publish only its own name and client URLs")]
    NotOwnRecord,
}

#[cfg(feature = "rocksdb")]
impl From<rocksdb::Error> for StoreError {
    fn from(err: rocksdb::Error) -> Self {
        StoreError::Storage(err.into_string())
    }
}
