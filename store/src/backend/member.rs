//! Which cluster, as which member, a data dir belongs to: a meta record written the first time
//! the store opens with ids (a new data dir, or one an actcd before cluster ids wrote, which is
//! upgraded in place) and checked at every later open, so that a data dir is never served under
//! another cluster's or member's flags. (The server gives a restarted member whose flags name
//! it in a membership changed since its data dir's own ids, as etcd ignores `--initial-cluster`
//! on restart.)

use crate::backend::engine::{Engine, Family, WriteSet};
use crate::error::StoreError;

/// The meta record: cluster id then member id, each u64 big-endian.
pub const MEMBER_KEY: &[u8] = b"member";

/// A cluster id and a member id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIds {
    /// The cluster's id.
    pub cluster_id: u64,
    /// This member's id.
    pub member_id: u64,
}

impl MemberIds {
    fn encode(self) -> Vec<u8> {
        [self.cluster_id.to_be_bytes(), self.member_id.to_be_bytes()].concat()
    }

    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let word = |at: usize| -> Result<u64, StoreError> {
            let slice = bytes
                .get(at..at + 8)
                .ok_or_else(|| StoreError::Corrupt(format!("member record of {} bytes", bytes.len())))?;
            let mut word = [0u8; 8];
            word.copy_from_slice(slice);
            Ok(u64::from_be_bytes(word))
        };
        if bytes.len() != 16 {
            return Err(StoreError::Corrupt(format!("member record of {} bytes", bytes.len())));
        }
        Ok(Self { cluster_id: word(0)?, member_id: word(8)? })
    }
}

/// The ids the data dir in `engine` is bound to, if it is.
pub fn stored(engine: &impl Engine) -> Result<Option<MemberIds>, StoreError> {
    engine.get(Family::Meta, MEMBER_KEY)?.map(|bytes| MemberIds::decode(&bytes)).transpose()
}

/// Binds the data dir in `engine` to `ids`: records them if it holds none, refuses it if it
/// holds others.
pub fn bind(engine: &impl Engine, ids: MemberIds) -> Result<(), StoreError> {
    match engine.get(Family::Meta, MEMBER_KEY)? {
        Some(bytes) => {
            let stored = MemberIds::decode(&bytes)?;
            if stored != ids {
                return Err(StoreError::OtherMember {
                    stored: format!("cluster {:x} as member {:x}", stored.cluster_id, stored.member_id),
                    given: format!("cluster {:x} as member {:x}", ids.cluster_id, ids.member_id),
                });
            }
            Ok(())
        }
        None => {
            let mut set = WriteSet::default();
            set.put(Family::Meta, MEMBER_KEY.to_vec(), ids.encode());
            engine.commit(&set)
        }
    }
}

/// Forgets the binding, so that the data dir belongs to whichever member opens it next: what a
/// restored snapshot needs (etcd's restore, too, takes the membership from the restoring flags,
/// not from the snapshot).
pub fn unbind(engine: &impl Engine) -> Result<(), StoreError> {
    let mut set = WriteSet::default();
    set.delete(Family::Meta, MEMBER_KEY.to_vec());
    engine.commit(&set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryEngine;

    #[test]
    fn a_data_dir_is_bound_to_its_first_ids_and_refuses_others() {
        let engine = MemoryEngine::new();
        let ids = MemberIds { cluster_id: 0xcdf818194e3a8c32, member_id: 0x8e9e05c52164694d };
        bind(&engine, ids).expect("an unbound data dir takes the ids");
        bind(&engine, ids).expect("the same ids again");
        let other = MemberIds { member_id: 1, ..ids };
        let err = bind(&engine, other).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the data dir belongs to cluster cdf818194e3a8c32 as member 8e9e05c52164694d, not cluster cdf818194e3a8c32 as member 1"
        );
        let mut torn = WriteSet::default();
        torn.put(Family::Meta, MEMBER_KEY.to_vec(), vec![1; 15]);
        engine.commit(&torn).expect("commit");
        assert!(matches!(bind(&engine, ids), Err(StoreError::Corrupt(_))));
        unbind(&engine).expect("unbind");
        bind(&engine, other).expect("an unbound data dir takes any ids");
    }
}
