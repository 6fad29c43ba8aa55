//! The store's apply path: a sequence of generated commands applied by one StoreCore on the
//! in-memory engine, group-committed at arbitrary points, with reads and reopens in between.
//! Checked after every step:
//! - a refused command changes nothing (the revision stays) and never stops the writer: no
//!   client request may fail after it changed the store (that would fail-stop every write);
//! - a command moves the revision by at most one; commits publish events inside their range;
//! - reads never see damaged data;
//! - reopening on the committed records gives the same revision, keys, leases, alarms,
//!   compaction revision and applied index (what a restart would give).
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

use actcd_store::backend::memory::MemoryEngine;
use actcd_store::{Batch, StoreConfig, StoreCore, StoreError};
use actcd_proto::etcdserverpb::{AlarmMember, AlarmType, RangeRequest, RangeResponse};

/// Steps per input: enough for compactions, leases and reopens to meet.
const MAX_STEPS: usize = 48;

type Core = StoreCore<MemoryEngine>;

/// What a restart must preserve.
#[derive(Debug, PartialEq)]
struct State {
    revision: i64,
    compacted: i64,
    applied_index: u64,
    leases: Vec<(i64, i64)>,
    alarms: Vec<AlarmMember>,
    kvs: RangeResponse,
}

fn state(core: &Core) -> State {
    let view = core.read_view();
    let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
    let mut leases = core.lease_list();
    leases.sort_unstable();
    State {
        revision: view.revision(),
        compacted: view.compacted_revision(),
        applied_index: view.applied_index(),
        leases,
        alarms: view.alarms(AlarmType::None).expect("alarms read"),
        kvs: view.range(&all).expect("a full range at the current revision reads"),
    }
}

fn healthy(result: &std::result::Result<impl Sized, StoreError>, what: &str) {
    if let Err(e @ (StoreError::Stopped(_) | StoreError::Storage(_) | StoreError::Corrupt(_))) = result {
        panic!("{what}: {e}");
    }
}

fn step(u: &mut Unstructured<'_>, core: &mut Core, batch: &mut Batch, engine: &MemoryEngine) -> Result<()> {
    let current = core.current_revision();
    match u.int_in_range(0..=15)? {
        0..=8 => {
            let command = actcd_fuzz::command(u, current)?;
            let result = core.apply(&command, batch);
            healthy(&result, &format!("{command:?}"));
            let after = core.current_revision();
            if result.is_err() {
                assert_eq!(after, current, "refused {command:?} moved the revision");
            } else {
                assert!(after == current || after == current + 1, "{command:?} moved {current} to {after}");
            }
        }
        9 | 10 => commit(core, std::mem::take(batch)),
        11 => {
            let view = core.read_view();
            healthy(&view.range(&actcd_fuzz::range(u, view.revision())?), "range");
        }
        12 => {
            let view = core.read_view();
            let txn = actcd_fuzz::txn(u, view.revision(), 0)?;
            if actcd_store::mvcc::txn::is_read_only(&txn) {
                healthy(&view.read_only_txn(&txn, core.config().max_txn_ops), "read-only txn");
            }
        }
        13 => {
            let view = core.read_view();
            let from = actcd_fuzz::revision(u, view.revision())?;
            let to = actcd_fuzz::revision(u, view.revision())?;
            let chunk = view.history(from, to, u.int_in_range(0..=256)?);
            healthy(&chunk, "history");
            if let Ok(chunk) = chunk {
                for event in &chunk.events {
                    let rev = event.kv.as_ref().map_or(0, |kv| kv.mod_revision);
                    assert!(
                        rev >= from && rev < chunk.next,
                        "history event at {rev} outside [{from}, {})",
                        chunk.next
                    );
                }
            }
            let key = actcd_fuzz::key(u)?;
            healthy(&view.get_at(&key, actcd_fuzz::revision(u, view.revision())?), "get_at");
        }
        _ => {
            commit(core, std::mem::take(batch));
            let before = state(core);
            let reopened = StoreCore::open(engine.clone(), core.config().clone()).expect("store reopens");
            *core = reopened;
            assert_eq!(state(core), before, "a reopen changed the store");
        }
    }
    Ok(())
}

fn commit(core: &mut Core, batch: Batch) {
    let committed = core.commit_by_log(batch, core.applied_index() + 1).expect("the in-memory engine commits");
    assert_eq!(committed.revision, core.current_revision(), "commit left revisions invisible");
    for event in &committed.events {
        let rev = event.kv.as_ref().map_or(0, |kv| kv.mod_revision);
        assert!(
            rev > committed.prev_revision && rev <= committed.revision,
            "event at {rev} outside ({}, {}]",
            committed.prev_revision,
            committed.revision
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    // A small quota now and then, so NOSPACE refusals are exercised too.
    let quota_bytes = if u.ratio(1, 4).unwrap_or(false) { 4096 } else { StoreConfig::default().quota_bytes };
    let config = StoreConfig { max_txn_ops: 8, quota_bytes, ..StoreConfig::default() };
    let engine = MemoryEngine::new();
    let mut core = StoreCore::open(engine.clone(), config).expect("an empty store opens");
    let mut batch = Batch::default();
    for _ in 0..MAX_STEPS {
        if u.is_empty() || step(&mut u, &mut core, &mut batch, &engine).is_err() {
            break;
        }
    }
    commit(&mut core, batch);
});
