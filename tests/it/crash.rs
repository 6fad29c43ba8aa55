//! Durability under crashes: 30 cycles of SIGKILL under a mixed load (puts, deletes, txns,
//! lease grants with attached keys, compactions, watches) from concurrent clients that never
//! retry a write. After every restart: each acknowledged write of the last two cycles is read
//! back at its revision with its value, every key holds what the acknowledged history says (a
//! writer's one unanswered write may or may not have happened, but wholly), revisions never
//! repeat or go back, acknowledged compactions and leases stay, HashKV at a revision taken
//! before the kill is unchanged, and every event a watcher received before the kill is durable,
//! agrees with the acknowledged write of its revision and leaves no acknowledged revision out.
//! At the end, at rest, the last revision and HashKV at it survive one more kill and restart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tonic::transport::Channel;

use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{
    request_op, CompactionRequest, Compare, DeleteRangeRequest, HashKvRequest, LeaseGrantRequest,
    LeaseTimeToLiveRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;

use crate::harness::Server;
use crate::watch_stream::{create, RawStream};

const CYCLES: usize = 30;
const WRITERS: usize = 6;
/// Keys per writer per cycle: few, so that puts, deletes and txns keep hitting the same keys.
const KEYS: usize = 8;
const LEASE_TTL: i64 = 60;

/// What a write did to each key it touched: the new value, or None for a delete.
type Effects = Vec<(String, Option<String>)>;

/// An acknowledged write.
#[derive(Clone, Debug)]
struct Acked {
    revision: i64,
    effects: Effects,
}

/// What one writer did in one cycle.
#[derive(Default, Debug)]
struct WriterLog {
    acked: Vec<Acked>,
    /// Leases whose grant was answered, with the key put under each if that put was answered.
    leases: Vec<(i64, Option<String>)>,
    /// The write the kill cut off: it may or may not have happened, but wholly if at all.
    unanswered: Option<Effects>,
}

/// A watched event: (revision, key, value or None for a delete).
type Event = (i64, String, Option<String>);

/// One watcher: what it watched and what it received before the kill.
struct Watched {
    prefix: String,
    events: Arc<Mutex<Vec<Event>>>,
}

/// What one cycle did before its kill.
struct Cycle {
    number: usize,
    /// The revision when the cycle's server came up: every write of the cycle is after it.
    start_revision: i64,
    writers: Vec<WriterLog>,
    /// (revision, hash, compact revision) of a HashKV taken under load before the kill.
    hash: (i64, u32, i64),
    watched: Vec<Watched>,
}

/// What the test knows across cycles.
#[derive(Default)]
struct History {
    /// Every key ever written and what it holds now (None: deleted).
    state: BTreeMap<String, Option<String>>,
    /// Every acknowledged revision: none may be acknowledged twice.
    revisions: HashSet<i64>,
    /// The previous cycle's acknowledged writes: read back again after one more restart.
    previous_acked: Vec<Acked>,
    /// The start revision of the previous cycle: compactions stay below it, so the writes of the
    /// last two cycles stay readable at their revisions.
    previous_start: i64,
    /// The highest acknowledged compaction.
    compacted: i64,
    acked_writes: usize,
    acked_deletes: usize,
    acked_txns: usize,
    acked_leases: usize,
    events_checked: usize,
}

fn put_request(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest { key: key.to_owned().into(), value: value.to_owned().into(), lease, ..Default::default() }
}

/// Puts, deletes, txns and lease grants on the writer's own keys, one at a time, until the
/// server is gone. Nothing is retried: a write without an answer is recorded as unanswered.
async fn write_until_killed(channel: Channel, cycle: usize, writer: usize) -> WriterLog {
    let mut kv = KvClient::new(channel.clone());
    let mut lease = LeaseClient::new(channel);
    let mut log = WriterLog::default();
    // The writer's own view of its keys' mod revisions (0: absent), for its txn compares.
    let mut mod_revision = [0i64; KEYS];
    let key = |j: usize| format!("c{cycle}/w{writer}/k{j}");
    for i in 0usize.. {
        let value = format!("{cycle}-{writer}-{i}");
        let j = i % KEYS;
        match i % 10 {
            3 | 7 => {
                let effects = vec![(key(j), None)];
                let request = DeleteRangeRequest { key: key(j).into(), ..Default::default() };
                let Ok(resp) = kv.delete_range(request).await.map(tonic::Response::into_inner) else {
                    log.unanswered = Some(effects);
                    return log;
                };
                assert_eq!(
                    resp.deleted,
                    i64::from(mod_revision[j] != 0),
                    "cycle {cycle}: writer {writer}'s key {} changed behind its back",
                    key(j)
                );
                // Deleting an absent key makes no revision.
                if resp.deleted == 1 {
                    log.acked.push(Acked { revision: resp.header.unwrap_or_default().revision, effects });
                }
                mod_revision[j] = 0;
            }
            1 | 5 => {
                let (first, second) = (key(j), key((j + 1) % KEYS));
                let compare = Compare {
                    key: first.clone().into(),
                    target: CompareTarget::Mod as i32,
                    result: CompareResult::Equal as i32,
                    target_union: Some(TargetUnion::ModRevision(mod_revision[j])),
                    ..Default::default()
                };
                let success = [&first, &second]
                    .map(|k| RequestOp {
                        request: Some(request_op::Request::RequestPut(put_request(k, &value, 0))),
                    })
                    .to_vec();
                let failure = vec![RequestOp {
                    request: Some(request_op::Request::RequestRange(RangeRequest {
                        key: first.clone().into(),
                        ..Default::default()
                    })),
                }];
                let effects = vec![(first.clone(), Some(value.clone())), (second, Some(value.clone()))];
                let txn = TxnRequest { compare: vec![compare], success, failure };
                let Ok(resp) = kv.txn(txn).await.map(tonic::Response::into_inner) else {
                    log.unanswered = Some(effects);
                    return log;
                };
                assert!(
                    resp.succeeded,
                    "cycle {cycle}: writer {writer}'s key {first} changed behind its back"
                );
                let revision = resp.header.unwrap_or_default().revision;
                log.acked.push(Acked { revision, effects });
                mod_revision[j] = revision;
                mod_revision[(j + 1) % KEYS] = revision;
            }
            9 => {
                let Ok(granted) = lease.lease_grant(LeaseGrantRequest { ttl: LEASE_TTL, id: 0 }).await else {
                    return log;
                };
                let id = granted.into_inner().id;
                log.leases.push((id, None));
                let leased = format!("c{cycle}/w{writer}/l{i}");
                let effects = vec![(leased.clone(), Some(value.clone()))];
                let Ok(resp) =
                    kv.put(put_request(&leased, &value, id)).await.map(tonic::Response::into_inner)
                else {
                    log.unanswered = Some(effects);
                    return log;
                };
                log.acked.push(Acked { revision: resp.header.unwrap_or_default().revision, effects });
                if let Some(last) = log.leases.last_mut() {
                    last.1 = Some(leased);
                }
            }
            _ => {
                let effects = vec![(key(j), Some(value.clone()))];
                let Ok(resp) = kv.put(put_request(&key(j), &value, 0)).await.map(tonic::Response::into_inner)
                else {
                    log.unanswered = Some(effects);
                    return log;
                };
                let revision = resp.header.unwrap_or_default().revision;
                log.acked.push(Acked { revision, effects });
                mod_revision[j] = revision;
            }
        }
    }
    log
}

/// Opens a watch on the keys under `prefix` from `start` and records its events until the
/// stream breaks; returns once the watch is created.
async fn watch(server: &Server, prefix: String, start: i64, prev_kv: bool) -> Watched {
    let create = WatchCreateRequest { prev_kv, ..create(&prefix, prefix_end(prefix.as_bytes()), start) };
    let (requests, mut responses) = RawStream::created(server, create).await;
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = Arc::clone(&events);
    tokio::spawn(async move {
        // Holding the request side keeps the stream open until the server goes away.
        let _requests = requests;
        while let Ok(Some(resp)) = responses.message().await {
            let mut sink = sink.lock().unwrap();
            for e in resp.events {
                let kv = e.kv.unwrap_or_default();
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                let value = (e.r#type == EventType::Put as i32)
                    .then(|| String::from_utf8_lossy(&kv.value).into_owned());
                sink.push((kv.mod_revision, key, value));
            }
        }
    });
    Watched { prefix, events }
}

async fn current_revision(kv: &mut KvClient<Channel>) -> i64 {
    let probe = RangeRequest { key: "c".into(), count_only: true, ..Default::default() };
    kv.range(probe).await.unwrap().into_inner().header.unwrap().revision
}

async fn hash_kv(maintenance: &mut MaintenanceClient<Channel>, revision: i64) -> (u32, i64) {
    let resp = maintenance.hash_kv(HashKvRequest { revision }).await.unwrap().into_inner();
    (resp.hash, resp.compact_revision)
}

/// Each (key, expected value, revision) that is not so (None: absent), described, read 16 at a
/// time.
async fn not_found_at(kv: &KvClient<Channel>, reads: Vec<(String, Option<String>, i64)>) -> Vec<String> {
    futures::stream::iter(reads)
        .map(|(key, value, revision)| check_at(kv.clone(), key, value, revision))
        .buffer_unordered(16)
        .filter_map(futures::future::ready)
        .collect()
        .await
}

/// Whether `key`, at `revision`, is what `expected` says (None: absent); a description of the
/// difference if not.
async fn check_at(
    mut kv: KvClient<Channel>,
    key: String,
    expected: Option<String>,
    revision: i64,
) -> Option<String> {
    let request = RangeRequest { key: key.clone().into(), revision, ..Default::default() };
    let resp = match kv.range(request).await {
        Ok(resp) => resp.into_inner(),
        Err(status) => return Some(format!("{key}@{revision}: {status}")),
    };
    let found = resp.kvs.first().map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.mod_revision));
    match (&expected, &found) {
        (None, None) => None,
        (Some(value), Some((got, mod_revision))) if got == value && *mod_revision == revision => None,
        _ => Some(format!("{key}@{revision}: expected {expected:?}, found (value, mod revision) {found:?}")),
    }
}

impl History {
    /// Checks, on the restarted `server`, everything `cycle` was told before its kill, then
    /// takes the surviving state as the new expected state.
    async fn verify(&mut self, server: &Server, cycle: Cycle) {
        let n = cycle.number;
        let mut kv = server.kv().await;
        let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
        let now = current_revision(&mut kv).await;
        let acked: Vec<Acked> = cycle.writers.iter().flat_map(|w| w.acked.iter().cloned()).collect();
        let events: Vec<Vec<Event>> =
            cycle.watched.iter().map(|w| w.events.lock().unwrap().clone()).collect();

        // Revisions: each acknowledged once, after the previous restart, none beyond the head.
        let newest_acked = acked.iter().map(|a| a.revision).max().unwrap_or(0);
        let newest_seen = events.iter().flatten().map(|e| e.0).max().unwrap_or(0);
        assert!(
            now >= newest_acked.max(newest_seen).max(cycle.hash.0),
            "cycle {n}: the revision went back to {now} (acknowledged {newest_acked}, watched {newest_seen})"
        );
        for a in &acked {
            assert!(
                a.revision > cycle.start_revision,
                "cycle {n}: revision {} reused after a restart",
                a.revision
            );
            assert!(
                self.revisions.insert(a.revision),
                "cycle {n}: revision {} acknowledged twice",
                a.revision
            );
        }

        // HashKV at a revision taken under load before the kill; compactions stay.
        let (hash_revision, hash, compact_revision) = cycle.hash;
        assert_eq!(
            hash_kv(&mut maintenance, hash_revision).await,
            (hash, compact_revision),
            "cycle {n}: HashKV at {hash_revision} changed across the restart"
        );
        let (_, compacted_now) = hash_kv(&mut maintenance, 0).await;
        assert!(compacted_now >= self.compacted, "cycle {n}: compaction {} was lost", self.compacted);

        // Every acknowledged write of this and the previous cycle, at its revision.
        let reads: Vec<_> = self
            .previous_acked
            .iter()
            .chain(&acked)
            .flat_map(|a| a.effects.iter().map(move |(k, v)| (k.clone(), v.clone(), a.revision)))
            .collect();
        let lost = not_found_at(&kv, reads).await;
        assert!(
            lost.is_empty(),
            "cycle {n}: {} acknowledged writes not found: {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );

        // Every key, now: the acknowledged history, plus each unanswered write wholly or not at all.
        for a in &acked {
            self.state.extend(a.effects.iter().cloned());
        }
        let all = RangeRequest { key: "c".into(), range_end: "d".into(), ..Default::default() };
        let actual: BTreeMap<String, Option<String>> = kv
            .range(all)
            .await
            .unwrap()
            .into_inner()
            .kvs
            .into_iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key).into_owned(),
                    Some(String::from_utf8_lossy(&kv.value).into_owned()),
                )
            })
            .collect();
        for effects in cycle.writers.iter().filter_map(|w| w.unanswered.as_ref()) {
            let applied = effects.iter().filter(|(k, v)| actual.get(k).cloned().flatten() == *v).count();
            let changes = effects.iter().filter(|(k, v)| self.state.get(k).cloned().flatten() != *v).count();
            if applied == effects.len() {
                self.state.extend(effects.iter().cloned());
            } else {
                assert!(
                    applied + changes == effects.len(),
                    "cycle {n}: the unanswered write {effects:?} happened in part"
                );
            }
        }
        let expected: BTreeMap<String, Option<String>> =
            self.state.iter().filter(|(_, v)| v.is_some()).map(|(k, v)| (k.clone(), v.clone())).collect();
        if expected != actual {
            let differ: Vec<_> = expected
                .keys()
                .chain(actual.keys())
                .filter(|k| expected.get(*k) != actual.get(*k))
                .take(5)
                .map(|k| format!("{k}: expected {:?}, found {:?}", expected.get(k), actual.get(k)))
                .collect();
            panic!("cycle {n}: the keys' current values differ from the acknowledged history: {differ:?}");
        }

        // Acknowledged leases survive with their keys.
        let mut lease = LeaseClient::connect(server.endpoint.clone()).await.unwrap();
        for (id, key) in cycle.writers.iter().flat_map(|w| w.leases.iter()) {
            let ttl = lease
                .lease_time_to_live(LeaseTimeToLiveRequest { id: *id, keys: true })
                .await
                .unwrap()
                .into_inner();
            assert!(ttl.ttl > 0 && ttl.granted_ttl == LEASE_TTL, "cycle {n}: lease {id} lost: {ttl:?}");
            if let Some(key) = key {
                assert!(
                    ttl.keys.iter().any(|k| k == key.as_bytes()),
                    "cycle {n}: lease {id} lost its key {key}"
                );
            }
        }

        // Watched events: ordered, unique, durable, equal to the acknowledged write of their
        // revision, and no acknowledged revision up to the last one seen left out.
        let by_revision: HashMap<i64, &Effects> = acked.iter().map(|a| (a.revision, &a.effects)).collect();
        for (watched, events) in cycle.watched.iter().zip(&events) {
            let mut pairs = HashSet::new();
            for pair in events.windows(2) {
                assert!(
                    pair[0].0 <= pair[1].0,
                    "cycle {n}: events out of order: {:?} then {:?}",
                    pair[0],
                    pair[1]
                );
            }
            for (revision, key, value) in events {
                assert!(pairs.insert((*revision, key.clone())), "cycle {n}: event {key}@{revision} twice");
                if let Some(effects) = by_revision.get(revision) {
                    assert!(
                        effects.contains(&(key.clone(), value.clone())),
                        "cycle {n}: event {key}={value:?}@{revision} is not the acknowledged write {effects:?}"
                    );
                }
            }
            let reads = events.iter().map(|(revision, key, value)| (key.clone(), value.clone(), *revision));
            let durable = not_found_at(&kv, reads.collect()).await;
            assert!(
                durable.is_empty(),
                "cycle {n}: watched events not durable: {:?}",
                &durable[..durable.len().min(5)]
            );
            let last_seen = events.last().map_or(0, |e| e.0);
            let seen: HashSet<i64> = events.iter().map(|e| e.0).collect();
            let watches = |k: &String| k.starts_with(&watched.prefix);
            let missing: Vec<i64> = acked
                .iter()
                .filter(|a| a.revision <= last_seen && a.effects.iter().any(|(k, _)| watches(k)))
                .map(|a| a.revision)
                .filter(|r| !seen.contains(r))
                .collect();
            assert!(
                missing.is_empty(),
                "cycle {n}: the watch on {} missed acknowledged revisions {missing:?}",
                watched.prefix
            );
            self.events_checked += events.len();
        }

        self.acked_writes += acked.len();
        self.acked_deletes += acked.iter().filter(|a| a.effects[0].1.is_none()).count();
        self.acked_txns += acked.iter().filter(|a| a.effects.len() == 2).count();
        self.acked_leases += cycle.writers.iter().map(|w| w.leases.len()).sum::<usize>();
        self.previous_acked = acked;
        self.previous_start = cycle.start_revision;
    }
}

/// Up to three compactions during the load, up to the previous cycle's start revision.
async fn compact(kv: &mut KvClient<Channel>, history: &mut History, n: usize) {
    let (from, to) = (history.compacted, history.previous_start);
    for step in 1..=3 {
        let revision = from + (to - from) * step / 3;
        if revision <= history.compacted {
            continue;
        }
        kv.compact(CompactionRequest { revision, physical: step == 3 })
            .await
            .unwrap_or_else(|s| panic!("cycle {n}: compaction at {revision}: {s}"));
        history.compacted = revision;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

#[tokio::test]
async fn kill_9_loop_under_mixed_load_loses_no_acknowledged_write() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let mut history = History::default();
    let mut previous: Option<Cycle> = None;
    let run = async {
        for n in 0..=CYCLES {
            let mut server = Server::actcd(dir.path(), &[]).await;
            let mut kv = server.kv().await;
            let start_revision = current_revision(&mut kv).await;
            if let Some(cycle) = previous.take() {
                history.verify(&server, cycle).await;
            }
            if n == CYCLES {
                // At rest: HashKV at the last revision, across one more kill and restart.
                let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
                let hash = hash_kv(&mut maintenance, start_revision).await;
                server.kill();
                let server = Server::actcd(dir.path(), &[]).await;
                let mut kv = server.kv().await;
                assert_eq!(current_revision(&mut kv).await, start_revision, "the last revision moved");
                let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
                assert_eq!(
                    hash_kv(&mut maintenance, start_revision).await,
                    hash,
                    "HashKV at the last revision {start_revision} changed across a restart"
                );
                break;
            }

            let prefix = format!("c{n}/");
            let one_writer = format!("c{n}/w0/");
            let watched = vec![
                watch(&server, prefix.clone(), start_revision + 1, true).await,
                watch(&server, one_writer.clone(), start_revision + 1, false).await,
            ];
            let mut writers = Vec::new();
            for w in 0..WRITERS {
                let channel = Channel::from_shared(server.endpoint.clone()).unwrap().connect().await.unwrap();
                writers.push(tokio::spawn(write_until_killed(channel, n, w)));
            }
            compact(&mut kv, &mut history, n).await;
            let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
            let hash_revision = current_revision(&mut kv).await;
            let (hash, compact_revision) = hash_kv(&mut maintenance, hash_revision).await;
            // Kill at a different point of the load each cycle.
            tokio::time::sleep(Duration::from_millis(150 + (n as u64 * 97) % 400)).await;
            server.kill();

            let mut logs = Vec::new();
            for w in writers {
                let log = tokio::time::timeout(Duration::from_secs(20), w).await;
                logs.push(log.expect("writers stop once the server is gone").unwrap());
            }
            assert!(logs.iter().any(|l| !l.acked.is_empty()), "cycle {n}: the load acknowledged nothing");
            previous = Some(Cycle {
                number: n,
                start_revision,
                writers: logs,
                hash: (hash_revision, hash, compact_revision),
                watched,
            });
        }
    };
    tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the crash loop finishes within 5 minutes");
    eprintln!(
        "crash loop: {CYCLES} kill -9 cycles, {} acknowledged writes ({} deletes, {} txns), {} lease \
         grants, {} watched events checked, highest compaction {}, 0 lost, in {:.0} s",
        history.acked_writes,
        history.acked_deletes,
        history.acked_txns,
        history.acked_leases,
        history.events_checked,
        history.compacted,
        started.elapsed().as_secs_f64()
    );
}
