//! openraft's own storage test suite, run against our log and state machine on a real RocksDB
//! in a temporary directory: votes, log reads, appends, truncation, purges, membership
//! recovery, applies and a snapshot built on one store and installed on another.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

use super::log_store::LogStore;
use super::snapshot_store::SnapshotStore;
use super::state_machine::StateMachine;
use super::types::TypeConfig;
use actcd_store::{RocksEngine, StoreConfig, StoreCore};

struct Fresh;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Fresh {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = RocksEngine::open(&dir.path().join("db")).expect("rocksdb opens");
        // A member that may lead: its own appends take the flusher's path.
        // Small segments: the suite's few entries still cross from one to the next.
        let log = LogStore::open_with(&engine, Some(1), 1 << 12)?;
        let core = StoreCore::open(engine, StoreConfig::default()).expect("store opens");
        let snapshots = SnapshotStore::open(dir.path().join("raft-snapshots"))?;
        let sm = StateMachine::new(core, snapshots, Vec::new())?.with_log(&log);
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Fresh).expect("openraft's storage suite passes");
}
