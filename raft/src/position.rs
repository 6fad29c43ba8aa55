//! Where the state machine stands: the last applied log id and the membership, written by
//! each apply in the same WriteBatch as the entries' changes (etcd's consistent index), read
//! back at open and when a snapshot is taken; beside them, the ids the membership ever dropped.
//! The applied log id is the store's one record of its position, read here as openraft's type.

use openraft::{CommittedLeaderId, LogId, StorageError, StoredMembership};

use super::types::{decode, MemberNode};
use actcd_store::backend::codec::{AppliedPosition, RAFT_MEMBERSHIP_KEY, RAFT_REMOVED_KEY};
use actcd_store::backend::engine::{Engine, Family};
use actcd_store::backend::recovery::applied_position;
use actcd_store::RocksEngine;

/// The membership as the state machine last applied it.
pub type Membership = StoredMembership<u64, MemberNode>;

fn read_error(err: impl std::fmt::Display) -> StorageError<u64> {
    openraft::StorageIOError::read_state_machine(openraft::AnyError::error(err.to_string())).into()
}

/// The applied log id and membership recorded in `engine`.
pub fn recorded_position(
    engine: &RocksEngine,
) -> Result<(Option<LogId<u64>>, Membership), StorageError<u64>> {
    let applied = applied_position(engine).map_err(read_error)?.map(log_id);
    let membership = match engine.get(Family::Meta, RAFT_MEMBERSHIP_KEY).map_err(read_error)? {
        Some(bytes) => decode(&bytes).map_err(read_error)?,
        None => Membership::default(),
    };
    Ok((applied, membership))
}

/// The member ids removed from the cluster, as `engine` records them.
pub fn recorded_removed(engine: &RocksEngine) -> Result<std::collections::BTreeSet<u64>, StorageError<u64>> {
    match engine.get(Family::Meta, RAFT_REMOVED_KEY).map_err(read_error)? {
        Some(bytes) => decode(&bytes).map_err(read_error),
        None => Ok(Default::default()),
    }
}

/// The store's applied position as openraft's log id.
pub fn log_id(position: AppliedPosition) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(position.term, position.leader), position.index)
}

/// A log id as the store records its applied position.
pub fn position(id: &LogId<u64>) -> AppliedPosition {
    AppliedPosition { term: id.leader_id.term, leader: id.leader_id.node_id, index: id.index }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state machine wrote its applied log id as openraft's LogId (postcard) under the key the
    /// store's record has now: a data dir written so opens at the same position.
    #[test]
    fn a_log_id_written_by_earlier_builds_reads_as_the_same_position() {
        let id = LogId::new(CommittedLeaderId::new(7, 3), 1_000_000);
        let bytes = super::super::types::encode(&id).expect("encodes");
        let read = actcd_store::backend::codec::decode_applied(&bytes).expect("decodes");
        assert_eq!(log_id(read), id);
        assert_eq!(position(&id), read);
    }
}
