//! A volatile [`Engine`]: ordered maps in memory, nothing on disk. It lets the store core run
//! without RocksDB (the fuzz targets build the core this way: no C++ build under sanitizers),
//! and it can be loaded with arbitrary records to see how the core opens a damaged data dir.
//! `commit` is atomic but not durable, so it is no engine for a server.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::engine::{Engine, Family, ScanVisitor, WriteOp, WriteSet};
use crate::error::StoreError;

/// Records handed to a scan's visitor per lock taken: the lock is not held while the visitor
/// runs, so a visitor may read the engine.
const SCAN_CHUNK: usize = 64;

type Records = BTreeMap<Vec<u8>, Vec<u8>>;

/// The three families' records. Clones share them, so a store can be reopened on what an
/// earlier one committed.
#[derive(Clone, Default)]
pub struct MemoryEngine {
    families: Arc<Mutex<[Records; 3]>>,
}

fn slot(family: Family) -> usize {
    match family {
        Family::History => 0,
        Family::Meta => 1,
        Family::Lease => 2,
    }
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<MutexGuard<'_, [Records; 3]>, StoreError> {
        self.families.lock().map_err(|_| StoreError::Storage("memory engine lock poisoned".into()))
    }

    /// Number of records in `family`.
    pub fn len(&self, family: Family) -> Result<usize, StoreError> {
        Ok(self.lock()?[slot(family)].len())
    }

    /// True when no family holds a record.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.lock()?.iter().all(BTreeMap::is_empty))
    }
}

impl Engine for MemoryEngine {
    fn commit(&self, set: &WriteSet) -> Result<(), StoreError> {
        let mut families = self.lock()?;
        for op in set.ops() {
            match op {
                WriteOp::Put { family, key, value } => {
                    families[slot(*family)].insert(key.clone(), value.clone());
                }
                WriteOp::Delete { family, key } => {
                    families[slot(*family)].remove(key);
                }
            }
        }
        Ok(())
    }

    fn get_many(&self, family: Family, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let families = self.lock()?;
        let records = &families[slot(family)];
        Ok(keys.iter().map(|k| records.get(k).cloned()).collect())
    }

    fn get(&self, family: Family, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock()?[slot(family)].get(key).cloned())
    }

    fn scan(&self, family: Family, from: &[u8], visit: &mut ScanVisitor<'_>) -> Result<(), StoreError> {
        let mut lower = Bound::Included(from.to_vec());
        loop {
            let chunk: Vec<(Vec<u8>, Vec<u8>)> = self.lock()?[slot(family)]
                .range((lower, Bound::Unbounded))
                .take(SCAN_CHUNK)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let Some((last, _)) = chunk.last() else { return Ok(()) };
            lower = Bound::Excluded(last.clone());
            for (key, value) in &chunk {
                if !visit(key, value)? {
                    return Ok(());
                }
            }
        }
    }

    fn size_bytes(&self) -> u64 {
        self.lock().map_or(0, |families| {
            families.iter().flat_map(|records| records.iter()).map(|(k, v)| (k.len() + v.len()) as u64).sum()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::command::Command;
    use crate::apply::writer::{StoreConfig, StoreCore};
    use crate::mvcc::batch::Batch;
    use actcd_proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};

    #[test]
    fn scan_crosses_chunks_and_stops_when_told() {
        let engine = MemoryEngine::new();
        let mut set = WriteSet::default();
        for i in 0..200u32 {
            set.put(Family::Lease, i.to_be_bytes().to_vec(), vec![1]);
        }
        set.delete(Family::Lease, 5u32.to_be_bytes().to_vec());
        engine.commit(&set).expect("commit");
        let mut seen = Vec::new();
        engine
            .scan(Family::Lease, &3u32.to_be_bytes(), &mut |k, _| {
                seen.push(u32::from_be_bytes(k.try_into().expect("4 bytes")));
                Ok(seen.len() < 150)
            })
            .expect("scan");
        let expected: Vec<u32> = (3..200).filter(|i| *i != 5).take(150).collect();
        assert_eq!(seen, expected);
        assert_eq!(engine.len(Family::Lease), Ok(199));
        assert_eq!(engine.len(Family::History), Ok(0));
    }

    #[test]
    fn store_reopens_on_what_it_committed() {
        let engine = MemoryEngine::new();
        assert_eq!(engine.is_empty(), Ok(true));
        let mut core = StoreCore::open(engine.clone(), StoreConfig::default()).expect("open");
        let mut batch = Batch::default();
        for (k, v) in [("a", "1"), ("b", "2"), ("a", "3")] {
            let put = PutRequest { key: k.into(), value: v.into(), ..Default::default() };
            core.apply(&Command::Put(put), &mut batch).expect("put");
        }
        let del = DeleteRangeRequest { key: "b".into(), ..Default::default() };
        core.apply(&Command::DeleteRange(del), &mut batch).expect("delete");
        core.commit_by_log(batch, core.applied_index() + 1).expect("commit");
        drop(core);
        let again = StoreCore::open(engine.clone(), StoreConfig::default()).expect("reopen");
        assert_eq!(again.current_revision(), 5);
        let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
        let resp = again.read_view().range(&all).expect("range");
        let got: Vec<_> =
            resp.kvs.iter().map(|kv| (kv.key.to_vec(), kv.value.to_vec(), kv.version)).collect();
        assert_eq!(got, vec![(b"a".to_vec(), b"3".to_vec(), 2)]);
        assert!(engine.size_bytes() > 0);
    }
}
