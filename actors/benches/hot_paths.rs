//! Micro-benchmarks of actcd's hot paths, timed with divan: the revision index, revision
//! encoding, watch matching, watch event fan-out and building a group-commit batch.
//!
//! Inputs are built once per benchmark outside the timed region (in the benchmark function
//! before `bench_*`, or per iteration with `with_inputs`).
//!
//! Run: `cargo bench -p actcd-actors --bench hot_paths` (add a filter such as `-- index` to run
//! one group).

use std::cell::{Cell, RefCell};

use actcd_actors::watch::messages::{StreamId, WatchSpec};
use actcd_actors::watch::range_index::RangeIndex;
use actcd_actors::watch::slab::WatchSlab;
use actcd_actors::watch::watcher::Watcher;
use actcd_actors::watch::watcher_group::{Delivery, History, Outbox, WatcherGroup};
use actcd_proto::etcdserverpb::PutRequest;
use actcd_proto::mvccpb::{event::EventType, Event, KeyValue};
use actcd_proto::watch_reply::WatchReply;
use actcd_store::mvcc::index::Index;
use actcd_store::mvcc::revision::Revision;
use actcd_store::{
    Batch, Command, CommittedEvents, HistoryChunk, RocksEngine, StoreConfig, StoreCore, StoreError,
};
use bytes::Bytes;
use divan::{black_box, Bencher};
use prost::Message as _;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    divan::main();
}

/// Keys in the index benchmarks.
const INDEX_KEYS: usize = 100_000;
/// Versions per key in the index benchmarks.
const INDEX_VERSIONS: i64 = 3;

/// The `i`th key: fixed width, so key order is number order (ranges cover known counts).
fn key(i: usize) -> Vec<u8> {
    format!("/registry/pods/default/pod-{i:08}").into_bytes()
}

fn index_keys() -> Vec<Vec<u8>> {
    (0..INDEX_KEYS).map(key).collect()
}

/// An index of `keys` with [`INDEX_VERSIONS`] versions each, written round by round: round
/// `r` (0-based) puts key `i` at main revision `2 + r·N + i`. Returns the index and its
/// newest revision.
fn index_with_versions(keys: &[Vec<u8>]) -> (Index, i64) {
    let mut index = Index::new();
    let mut main = 1;
    for _ in 0..INDEX_VERSIONS {
        for k in keys {
            main += 1;
            index.put(k, Revision::new(main, 0));
        }
    }
    (index, main)
}

mod index {
    use super::*;

    /// A put of an existing key (a new version) into a 100k-key index.
    #[divan::bench]
    fn put_100k_keys(bencher: Bencher) {
        let keys = index_keys();
        let mut index = Index::new();
        let mut main = 1;
        for k in &keys {
            main += 1;
            index.put(k, Revision::new(main, 0));
        }
        let mut i = 0;
        bencher.bench_local(|| {
            main += 1;
            i = (i + 7919) % INDEX_KEYS;
            index.put(black_box(&keys[i]), Revision::new(main, 0));
        });
    }

    /// A get at the newest revision in a 100k-key, 3-version index.
    #[divan::bench]
    fn get_latest(bencher: Bencher) {
        let keys = index_keys();
        let (index, newest) = index_with_versions(&keys);
        let mut i = 0;
        bencher.bench_local(|| {
            i = (i + 7919) % INDEX_KEYS;
            black_box(index.get(black_box(&keys[i]), newest))
        });
    }

    /// A get at a revision of the first round (the key's oldest version) in a 100k-key,
    /// 3-version index.
    #[divan::bench]
    fn get_historical(bencher: Bencher) {
        let keys = index_keys();
        let (index, _) = index_with_versions(&keys);
        let first_round_end = 1 + INDEX_KEYS as i64;
        let mut i = 0;
        bencher.bench_local(|| {
            i = (i + 7919) % INDEX_KEYS;
            black_box(index.get(black_box(&keys[i]), first_round_end))
        });
    }

    /// A range of 100 keys at the newest revision with limit 10 and with no limit.
    #[divan::bench(args = [10, 0])]
    fn range_100_keys(bencher: Bencher, limit: usize) {
        let keys = index_keys();
        let (index, newest) = index_with_versions(&keys);
        let start = key(50_000);
        let end = key(50_100);
        bencher.bench_local(|| {
            let mut visited = 0usize;
            let count = index.range(black_box(&start), black_box(&end), newest, limit, |k, at| {
                visited += k.len() + at.version as usize;
            });
            assert_eq!(count, 100);
            black_box(visited)
        });
    }

    /// Compaction of a 100k-key, 3-version index at the last revision of the second round:
    /// drops the oldest version of every key (100k revisions) and rebuilds the tree.
    #[divan::bench(sample_count = 20)]
    fn compact_100k_keys_3_versions(bencher: Bencher) {
        let keys = index_keys();
        let at = 1 + 2 * INDEX_KEYS as i64;
        bencher.with_inputs(|| index_with_versions(&keys).0).bench_local_values(|mut index| {
            let removed = index.compact(at);
            assert_eq!(removed.len(), INDEX_KEYS);
            (index, removed)
        });
    }
}

mod revision {
    use super::*;

    const REV: Revision = Revision::new(123_456_789, 42);

    /// `pack` then `unpack`.
    #[divan::bench]
    fn pack_unpack() -> (Revision, bool) {
        let packed = black_box(REV).pack(black_box(true)).expect("packable revision");
        Revision::unpack(black_box(packed))
    }

    /// `to_key_bytes` then `from_key_bytes`.
    #[divan::bench]
    fn key_bytes_round_trip() -> Revision {
        let bytes = black_box(REV).to_key_bytes();
        Revision::from_key_bytes(black_box(&bytes)).expect("decodable key")
    }
}

fn spec(stream: StreamId, watch_id: i64, key: Bytes, range_end: Bytes, start_revision: i64) -> WatchSpec {
    WatchSpec {
        stream,
        watch_id,
        key,
        range_end,
        start_revision,
        prev_kv: false,
        no_put: false,
        no_delete: false,
        progress_notify: false,
    }
}

mod watch_matching {
    use super::*;

    const EXACT: usize = 1_000_000;
    const PREFIXES: usize = 10_000;

    fn exact_key(i: usize) -> Vec<u8> {
        format!("key/{i:07}").into_bytes()
    }

    /// A slab of 1M exact-key watchers (`key/0000000` …) and 10k prefix watchers: prefix `j`
    /// covers `key/{j:05}00` to `key/{j:05}99`, so keys below `key/1000000` are each covered
    /// by one exact and one prefix watcher.
    fn build() -> (WatchSlab, RangeIndex) {
        let mut slots = WatchSlab::default();
        for i in 0..EXACT {
            slots.insert(Watcher::new(&spec(i as StreamId, 0, exact_key(i).into(), Bytes::new(), 2)));
        }
        for j in 0..PREFIXES {
            let prefix = format!("key/{j:05}").into_bytes();
            let mut end = prefix.clone();
            if let Some(last) = end.last_mut() {
                *last += 1;
            }
            slots.insert(Watcher::new(&spec(j as StreamId, 1, prefix.into(), end.into(), 2)));
        }
        let mut index = RangeIndex::default();
        for slot in 0..slots.end() {
            index.insert(&slots, slot);
        }
        (slots, index)
    }

    fn bench_matches(bencher: Bencher, key: &[u8], expected: usize) {
        let (slots, index) = build();
        let mut check = 0;
        index.matches(key, |s| {
            if slots.get(s).is_some_and(|w| w.covers(key)) {
                check += 1;
            }
        });
        assert_eq!(check, expected, "watchers covering {key:?}");
        bencher.bench_local(|| {
            let mut found = 0u32;
            index.matches(black_box(key), |s| found += s);
            black_box(found)
        });
    }

    /// A key watched by one exact-key and one prefix watcher.
    #[divan::bench]
    fn hit(bencher: Bencher) {
        bench_matches(bencher, b"key/0123456", 2);
    }

    /// A key no watcher covers.
    #[divan::bench]
    fn miss(bencher: Bencher) {
        bench_matches(bencher, b"other/0123456", 0);
    }
}

mod fan_out {
    use super::*;

    const WATCHERS: usize = 1000;

    /// History with nothing in it: live delivery without prev_kv never reads it.
    struct NoHistory;

    impl History for NoHistory {
        fn history(&self, _from: i64, to: i64, _max_bytes: usize) -> Result<HistoryChunk, StoreError> {
            Ok(HistoryChunk { events: Vec::new(), next: to + 1 })
        }
        fn get_at(&self, _key: &[u8], _revision: i64) -> Result<Option<KeyValue>, StoreError> {
            Ok(None)
        }
        fn compacted(&self) -> i64 {
            0
        }
    }

    /// Stream buffers that take everything, count the responses and encode each as the
    /// stream's gRPC encoder would (into a reused buffer): the cost of a response includes
    /// its encoding, wherever that happens.
    #[derive(Default)]
    struct Sink {
        responses: usize,
        encoded: Vec<u8>,
    }

    impl Outbox for Sink {
        fn deliver(&mut self, _stream: StreamId, responses: Vec<WatchReply>) -> Delivery {
            self.responses += responses.len();
            for r in &responses {
                self.encoded.clear();
                r.encode(&mut self.encoded).expect("a Vec grows");
            }
            Delivery::Sent
        }
    }

    /// One committed put of the watched key, fanned out to 1000 synced watchers (one per
    /// stream).
    #[divan::bench]
    fn one_put_to_1000_watchers(bencher: Bencher) {
        let hot = Bytes::from_static(b"/config/hot");
        let mut group = WatcherGroup::new(1);
        for i in 0..WATCHERS {
            group.add(&spec(i as StreamId, 0, hot.clone(), Bytes::new(), 2));
        }
        assert_eq!(group.unsynced_len(), 0);
        let history = NoHistory;
        let mut sink = Sink::default();
        let revision = Cell::new(1);
        bencher
            .with_inputs(|| {
                let prev = revision.get();
                revision.set(prev + 1);
                let kv = KeyValue {
                    key: hot.clone(),
                    create_revision: 2,
                    mod_revision: prev + 1,
                    version: prev,
                    value: Bytes::from_static(&[b'v'; 256]),
                    lease: 0,
                };
                CommittedEvents {
                    prev_revision: prev,
                    revision: prev + 1,
                    events: vec![Event { r#type: EventType::Put as i32, kv: Some(kv), prev_kv: None }],
                }
            })
            .bench_local_refs(|batch| group.on_committed(batch, &history, &mut sink));
        assert_eq!(group.unsynced_len(), 0, "every delivery was accepted");
        assert!(sink.responses >= WATCHERS);
    }
}

mod group_commit {
    use super::*;

    const PUTS: usize = 100;

    /// `StoreCore::apply` of 100 puts of new keys (256-byte values) into one batch, without
    /// the commit: the work of a group-commit flush before its fsync.
    #[divan::bench]
    fn apply_100_puts(bencher: Bencher) {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = RocksEngine::open(dir.path()).expect("open RocksDB");
        let store = RefCell::new(StoreCore::open(engine, StoreConfig::default()).expect("open store"));
        let value = Bytes::from(vec![b'v'; 256]);
        let next = Cell::new(0usize);
        bencher
            .with_inputs(|| {
                let first = next.get();
                next.set(first + PUTS);
                let commands: Vec<Command> = (first..first + PUTS)
                    .map(|i| {
                        Command::Put(PutRequest {
                            key: key(i).into(),
                            value: value.clone(),
                            ..Default::default()
                        })
                    })
                    .collect();
                (commands, Batch::default())
            })
            .bench_local_values(|(commands, mut batch)| {
                let mut store = store.borrow_mut();
                for command in &commands {
                    store.apply(command, &mut batch).expect("apply put");
                }
                (commands, batch)
            });
    }
}
