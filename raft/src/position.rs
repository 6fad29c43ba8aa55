//! Where the state machine stands: the last applied log id and the membership, written by
//! each apply in the same WriteBatch as the entries' changes (etcd's consistent index), read
//! back at open and when a snapshot is taken; beside them, the ids the membership ever dropped.

use openraft::{LogId, StorageError, StoredMembership};

use super::types::{decode, MemberNode};
use actcd_store::backend::codec::{RAFT_APPLIED_KEY, RAFT_MEMBERSHIP_KEY, RAFT_REMOVED_KEY};
use actcd_store::backend::engine::{Engine, Family};
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
    let applied = match engine.get(Family::Meta, RAFT_APPLIED_KEY).map_err(read_error)? {
        Some(bytes) => Some(decode(&bytes).map_err(read_error)?),
        None => None,
    };
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
