//! Model-based tests of the store core on a real RocksDB: random commands, group-committed in
//! random batch sizes, with restarts, compared after every step with etcd's sequential model
//! (actcd-test-support's `etcd_model`, the one the linearizability checker uses).

use actcd_test_support::etcd_model::{self, Request, Response};
use bytes::Bytes;
use proptest::prelude::*;

use actcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest};

use crate::apply::command::{Command, CommandResponse};
use crate::apply::writer::{StoreConfig, StoreCore};
use crate::backend::rocks::RocksEngine;
use crate::error::StoreError;
use crate::mvcc::batch::Batch;
use crate::mvcc::read_view::ReadView;

/// (value, create_revision, mod_revision, version) of a live key.
type Live = (Vec<u8>, i64, i64, i64);

/// etcd's sequential model of the store (shared with the linearizability checker), and the
/// revision compacted up to: the model keeps every revision, so what a compaction hides is this
/// test's to check.
#[derive(Clone)]
struct Model {
    etcd: etcd_model::Model,
    compacted: i64,
}

impl Model {
    fn new() -> Self {
        Self { etcd: etcd_model::Model::new(), compacted: 0 }
    }

    fn current(&self) -> i64 {
        self.etcd.revision()
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        let put = PutRequest {
            key: Bytes::copy_from_slice(key),
            value: Bytes::copy_from_slice(value),
            ..Default::default()
        };
        self.etcd.apply(&Request::Put(put));
    }

    fn delete(&mut self, key: &[u8], end: &[u8]) -> usize {
        let delete = DeleteRangeRequest {
            key: Bytes::copy_from_slice(key),
            range_end: Bytes::copy_from_slice(end),
            ..Default::default()
        };
        match self.etcd.apply(&Request::Delete(delete)).0 {
            Response::Delete(r) => r.deleted as usize,
            other => panic!("a delete answered {other:?}"),
        }
    }

    /// The live keys of [key, end) at `rev` (0: the current revision). A range changes nothing,
    /// but the model answers every request through `apply`.
    fn range(&mut self, key: &[u8], end: &[u8], rev: i64) -> Vec<(Vec<u8>, Live)> {
        let range = RangeRequest {
            key: Bytes::copy_from_slice(key),
            range_end: Bytes::copy_from_slice(end),
            revision: rev,
            ..Default::default()
        };
        match self.etcd.apply(&Request::Range(range)).0 {
            Response::Range(r) => r
                .kvs
                .into_iter()
                .map(|kv| {
                    (kv.key.to_vec(), (kv.value.to_vec(), kv.create_revision, kv.mod_revision, kv.version))
                })
                .collect(),
            other => panic!("a range answered {other:?}"),
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Put(u8, u8),
    Delete(u8, u8),
    Compact(u8),
    Read(u8, u8, u8),
    Commit,
    Restart,
}

fn key(k: u8) -> Vec<u8> {
    vec![b'a' + k % 6]
}

fn end(k: u8, e: u8) -> Vec<u8> {
    match e % 3 {
        0 => Vec::new(),
        1 => vec![0],
        _ => vec![b'a' + (k % 6) + e % 4],
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(k, e)| Step::Delete(k, e)),
        1 => any::<u8>().prop_map(Step::Compact),
        3 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(k, e, r)| Step::Read(k, e, r)),
        2 => Just(Step::Commit),
        1 => Just(Step::Restart),
    ]
}

fn open(dir: &std::path::Path) -> StoreCore<RocksEngine> {
    StoreCore::open(RocksEngine::open(dir).expect("engine opens"), StoreConfig::default())
        .expect("store opens")
}

fn check_read(view: &ReadView<RocksEngine>, model: &mut Model, k: u8, e: u8, r: u8) {
    let (key, end) = (key(k), end(k, e));
    let current = model.current();
    let rev = i64::from(r) % (current + 2);
    let req = RangeRequest {
        key: Bytes::from(key.clone()),
        range_end: Bytes::from(end.clone()),
        revision: rev,
        ..Default::default()
    };
    let got = view.range(&req);
    if rev > current {
        assert_eq!(got, Err(StoreError::FutureRevision));
        return;
    }
    let at = if rev <= 0 { current } else { rev };
    if at < model.compacted {
        assert_eq!(got, Err(StoreError::Compacted));
        return;
    }
    let got = got.expect("range");
    assert_eq!(got.header.map(|h| h.revision), Some(current));
    let want = model.range(&key, &end, rev);
    assert_eq!(got.count as usize, want.len());
    let got: Vec<(Vec<u8>, Live)> = got
        .kvs
        .into_iter()
        .map(|kv| (kv.key.to_vec(), (kv.value.to_vec(), kv.create_revision, kv.mod_revision, kv.version)))
        .collect();
    assert_eq!(got, want, "range {key:?}..{end:?} at {rev}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(steps in proptest::collection::vec(step(), 1..80)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(dir.path());
        let mut model = Model::new();
        // The model's state as of the last commit: readers see only committed revisions.
        let mut committed = Model::new();
        let mut batch = Batch::default();
        for step in steps {
            match step {
                Step::Put(k, v) => {
                    let req = PutRequest { key: Bytes::from(key(k)), value: Bytes::from(vec![v]), ..Default::default() };
                    let resp = store.apply(&Command::Put(req), &mut batch).expect("put");
                    model.put(&key(k), &[v]);
                    let CommandResponse::Put(resp) = resp else { panic!("kind") };
                    prop_assert_eq!(resp.header.map(|h| h.revision), Some(model.current()));
                }
                Step::Delete(k, e) => {
                    let req = DeleteRangeRequest { key: Bytes::from(key(k)), range_end: Bytes::from(end(k, e)), prev_kv: false };
                    let resp = store.apply(&Command::DeleteRange(req), &mut batch).expect("delete");
                    let deleted = model.delete(&key(k), &end(k, e));
                    let CommandResponse::DeleteRange(resp) = resp else { panic!("kind") };
                    prop_assert_eq!(resp.deleted as usize, deleted);
                    prop_assert_eq!(resp.header.map(|h| h.revision), Some(model.current()));
                }
                Step::Compact(r) => {
                    let rev = i64::from(r) % (model.current() + 1);
                    let got = store.apply(&Command::Compact(CompactionRequest { revision: rev, physical: true }), &mut batch);
                    if rev <= model.compacted {
                        prop_assert_eq!(got, Err(StoreError::Compacted));
                    } else {
                        prop_assert!(got.is_ok());
                        // Readers learn of a compaction at its commit, like of any write:
                        // until then they still read the revisions it will remove.
                        model.compacted = rev;
                    }
                }
                Step::Read(k, e, r) => check_read(&store.read_view(), &mut committed, k, e, r),
                Step::Commit => {
                    store.commit_by_log(std::mem::take(&mut batch), store.applied_index() + 1).expect("commit");
                    committed = model.clone();
                }
                Step::Restart => {
                    store.commit_by_log(std::mem::take(&mut batch), store.applied_index() + 1).expect("commit");
                    committed = model.clone();
                    drop(store);
                    store = open(dir.path());
                    prop_assert_eq!(store.read_view().revision(), model.current().max(model.compacted));
                }
            }
        }
        store.commit_by_log(batch, store.applied_index() + 1).expect("commit");
        let view = store.read_view();
        for k in 0..6 {
            for r in 0..=model.current() as u8 {
                check_read(&view, &mut model, k, 1, r);
                check_read(&view, &mut model, k, 0, r);
            }
        }
    }
}

#[test]
fn a_data_dir_of_another_format_is_refused() {
    use crate::backend::engine::{Engine, Family, WriteSet};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let engine = RocksEngine::open(dir.path()).expect("engine");
        let mut set = WriteSet::default();
        set.put(Family::Meta, crate::backend::codec::FORMAT_KEY.to_vec(), b"someone-else-v9".to_vec());
        engine.commit(&set).expect("commit");
    }
    let engine = RocksEngine::open(dir.path()).expect("engine");
    match StoreCore::open(engine, StoreConfig::default()) {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains("someone-else-v9"), "{msg}"),
        Err(other) => panic!("wrong error {other:?}"),
        Ok(_) => panic!("a foreign format was accepted"),
    }
}
