//! Faults of the network between members, on hosts of their own (netns): the leader cut off
//! from both followers, and a member's link made slow and lossy, while clients write. What must
//! hold is what etcd promises: the majority elects a leader and writes again within two
//! election timeouts (plus the slack a shared 2-core machine needs), the cut-off leader never
//! answers a linearizable read, it rejoins as a follower once the cut heals, a slow link slows
//! the cluster and loses nothing, and every member ends with the same data. The leader cut runs
//! on three etcd 3.4 members too: the checks are etcd's behaviour, and the time to the first
//! write after the cut is printed for both.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use actcd_test_support::server::Kind;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use crate::cluster::Cluster;
use crate::netns::{self, NetCluster, Shape};

/// Each call's bound: a call that takes longer counts as unanswered (not acknowledged).
const CALL: Duration = Duration::from_secs(1);

/// A put's bound, as clientv3 bounds its calls and failover-compare its puts: a put stuck
/// behind the fault gives way to the next one soon, so the first write after the cut is
/// timed to within this.
const PUT_WITHIN: Duration = Duration::from_millis(300);

/// etcd's default election timeout, which both clusters run with.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(1);

/// What a shared, busy 2-core machine may add to two election timeouts: starting processes
/// beside the test, a CI build on the same cores.
const SLACK: Duration = Duration::from_secs(3);

/// A channel that connects when first used and reconnects after a failure, as a client does.
fn channel(endpoint: &str) -> Channel {
    Endpoint::from_shared(endpoint.to_string()).unwrap().connect_timeout(CALL).timeout(CALL).connect_lazy()
}

/// One acknowledged put: its key, when it was made and when it was answered.
struct Acked {
    key: String,
    called: Instant,
    answered: Instant,
}

/// What a writer got.
#[derive(Default)]
struct Written {
    acked: Vec<Acked>,
    /// Refusals and timeouts, by text.
    errors: BTreeMap<String, usize>,
}

/// Puts unique keys `w/NAME/N` through `endpoint` until `stop`, one after another.
fn writer(endpoint: String, name: String, stop: tokio::sync::watch::Receiver<bool>) -> JoinHandle<Written> {
    tokio::spawn(async move {
        let mut kv = KvClient::new(channel(&endpoint));
        let mut written = Written::default();
        for n in 0.. {
            if *stop.borrow() {
                break;
            }
            let key = format!("w/{name}/{n:06}");
            let put =
                PutRequest { key: key.clone().into(), value: vec![b'v'; 64].into(), ..Default::default() };
            let called = Instant::now();
            match tokio::time::timeout(PUT_WITHIN, kv.put(put)).await {
                Ok(Ok(_)) => written.acked.push(Acked { key, called, answered: Instant::now() }),
                Ok(Err(status)) => {
                    *written
                        .errors
                        .entry(format!("{:?}: {}", status.code(), status.message()))
                        .or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => *written.errors.entry("timed out".to_string()).or_default() += 1,
            }
        }
        written
    })
}

/// Writers, one per endpoint, stopped together.
struct Writers {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<Written>>,
}

impl Writers {
    fn start(endpoints: &[(String, String)]) -> Writers {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let tasks =
            endpoints.iter().map(|(name, e)| writer(e.clone(), name.clone(), stopped.clone())).collect();
        Writers { stop, tasks }
    }

    async fn finish(self) -> Written {
        self.stop.send(true).unwrap();
        let mut all = Written::default();
        for task in self.tasks {
            let w = task.await.unwrap();
            all.acked.extend(w.acked);
            for (e, n) in w.errors {
                *all.errors.entry(e).or_default() += n;
            }
        }
        all
    }
}

/// Every key under `w/` that member `i` holds, read linearizably (it has applied everything
/// committed before the read).
async fn keys_on(cluster: &Cluster, i: usize) -> HashSet<Vec<u8>> {
    let mut kv = KvClient::new(channel(&cluster.member(i).endpoint));
    let all =
        RangeRequest { key: "w/".into(), range_end: "w0".into(), keys_only: true, ..Default::default() };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout(Duration::from_secs(5), kv.range(all.clone())).await {
            Ok(Ok(r)) => return r.into_inner().kvs.into_iter().map(|kv| kv.key.to_vec()).collect(),
            other => assert!(Instant::now() < deadline, "member {i} answers no read in 20 s: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts every acknowledged key is on every running member and that they hash alike at one
/// revision, after a last write through `via`.
async fn nothing_lost(cluster: &Cluster, via: usize, written: &Written, what: &str) -> i64 {
    let mut kv = KvClient::new(channel(&cluster.member(via).endpoint));
    let deadline = Instant::now() + Duration::from_secs(20);
    let last = loop {
        let put = PutRequest { key: "w/last".into(), value: "x".into(), ..Default::default() };
        match kv.put(put).await {
            Ok(r) => break r.into_inner().header.unwrap().revision,
            Err(status) => assert!(Instant::now() < deadline, "{what}: no write in 20 s: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    cluster.wait_for_equal_hashes(last).await;
    for i in cluster.running() {
        let keys = keys_on(cluster, i).await;
        let lost: Vec<&str> = written
            .acked
            .iter()
            .filter(|a| !keys.contains(a.key.as_bytes()))
            .map(|a| a.key.as_str())
            .collect();
        assert!(
            lost.is_empty(),
            "{what}: member {i} lacks {} acknowledged puts: {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
    }
    last
}

/// Status of member `i`: (its id, the leader it names), or None when it does not answer.
async fn status(cluster: &Cluster, i: usize) -> Option<(u64, u64)> {
    let mut m = actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient::new(channel(
        &cluster.member(i).endpoint,
    ));
    let s = tokio::time::timeout(CALL, m.status(actcd_proto::etcdserverpb::StatusRequest {}))
        .await
        .ok()?
        .ok()?
        .into_inner();
    Some((s.header?.member_id, s.leader))
}

/// Reads asked of the cut-off leader while it is cut off: linearizable ones answered (each a
/// stale-read hazard) and refused, serializable ones answered.
#[derive(Debug, Default)]
struct IsolatedReads {
    linearizable_answered: Vec<String>,
    linearizable_refused: BTreeMap<String, usize>,
    serializable_answered: usize,
}

/// Asks `endpoint` for linearizable and serializable reads in turn until `stop`.
fn isolated_reader(endpoint: String, stop: tokio::sync::watch::Receiver<bool>) -> JoinHandle<IsolatedReads> {
    tokio::spawn(async move {
        let mut kv = KvClient::new(channel(&endpoint));
        let mut reads = IsolatedReads::default();
        while !*stop.borrow() {
            for serializable in [false, true] {
                let read = RangeRequest {
                    key: "w/".into(),
                    range_end: "w0".into(),
                    count_only: true,
                    serializable,
                    ..Default::default()
                };
                let answer = tokio::time::timeout(Duration::from_secs(2), kv.range(read)).await;
                match (serializable, answer) {
                    (false, Ok(Ok(r))) => {
                        let r = r.into_inner();
                        reads.linearizable_answered.push(format!(
                            "count {} at revision {}",
                            r.count,
                            r.header.map_or(0, |h| h.revision)
                        ));
                    }
                    (false, Ok(Err(s))) => {
                        *reads
                            .linearizable_refused
                            .entry(format!("{:?}: {}", s.code(), s.message()))
                            .or_default() += 1
                    }
                    (false, Err(_)) => {
                        *reads.linearizable_refused.entry("timed out".into()).or_default() += 1
                    }
                    (true, Ok(Ok(_))) => reads.serializable_answered += 1,
                    (true, _) => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        reads
    })
}

/// What a leader cut came to.
struct Cut {
    /// From the cut to the first write the majority acknowledged that was made after it.
    recovered: Duration,
    /// Whether the cut-off leader had stopped naming itself leader when the cut healed.
    stepped_down: bool,
}

/// The leader of three members on hosts of their own is cut off from both followers while
/// clients write through the followers.
async fn leader_partition(kind: Kind) -> Cut {
    netns::available().expect("network namespaces (run as root, with iproute2)");
    let nc = NetCluster::start(kind, 3, 0, &[]).await;
    let cluster = &nc.cluster;
    // The leader is cut only if it still leads once the writers have run a while (a busy
    // machine may have moved the leadership meanwhile): else the writers start again.
    let (leader, leader_id, majority, writers) = loop {
        let leader = cluster.leader().await;
        let (leader_id, _) = status(cluster, leader).await.unwrap();
        let majority: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
        let endpoints: Vec<(String, String)> = majority
            .iter()
            .flat_map(|i| (0..2).map(move |c| (format!("m{i}c{c}"), *i)))
            .map(|(name, i)| (name, cluster.member(i).endpoint.clone()))
            .collect();
        let writers = Writers::start(&endpoints);
        tokio::time::sleep(Duration::from_secs(2)).await;
        if status(cluster, leader).await == Some((leader_id, leader_id)) {
            break (leader, leader_id, majority, writers);
        }
        writers.finish().await;
    };

    // Timed from when `ip` has taken the link down (running it takes milliseconds, in which
    // writes still commit).
    nc.net.partition(leader);
    let cut = Instant::now();
    let (stop_reads, reads_stopped) = tokio::sync::watch::channel(false);
    let reader = isolated_reader(cluster.member(leader).endpoint.clone(), reads_stopped);
    // Writes go on through the majority; the old leader is asked for reads meanwhile.
    tokio::time::sleep(2 * ELECTION_TIMEOUT + SLACK + Duration::from_secs(1)).await;
    let new_leader = {
        let mut named = None;
        for &i in &majority {
            if let Some((_, l)) = status(cluster, i).await {
                named = named.or(Some(l));
            }
        }
        named.unwrap_or(0)
    };
    let stepped_down = status(cluster, leader).await.is_none_or(|(_, l)| l != leader_id);
    stop_reads.send(true).unwrap();
    let reads = reader.await.unwrap();
    nc.net.heal(leader);
    let healed = Instant::now();

    // The old leader rejoins as a follower: it names a leader, not itself (etcd 3.4's, whose
    // term grew while it campaigned alone, may force one more election on its return).
    let rejoined = loop {
        if let Some((_, l)) = status(cluster, leader).await {
            if l != 0 && l != leader_id {
                break healed.elapsed();
            }
        }
        assert!(
            healed.elapsed() < Duration::from_secs(20),
            "{kind:?}: the old leader did not rejoin as a follower in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = writers.finish().await;

    let first_after = written.acked.iter().filter(|a| a.called >= cut).map(|a| a.answered).min();
    let recovered = first_after.map(|t| t - cut);
    let before = written.acked.iter().filter(|a| a.called < cut).count();
    let after = written.acked.len() - before;
    eprintln!(
        "{kind:?} leader partition: first write on the majority {recovered:?} after the cut (new leader {new_leader:x}, old {leader_id:x}); \
         {before} puts before the cut, {after} after; the cut-off leader: {} linearizable reads refused ({:?}), {} serializable answered, \
         stepped down {stepped_down}; rejoined as follower {rejoined:?} after the heal; client errors {:?}",
        reads.linearizable_refused.values().sum::<usize>(),
        reads.linearizable_refused,
        reads.serializable_answered,
        written.errors
    );
    assert!(before > 10, "{kind:?}: only {before} puts before the cut");
    assert!(new_leader != 0 && new_leader != leader_id, "{kind:?}: the majority names no new leader");
    assert!(
        reads.linearizable_answered.is_empty(),
        "{kind:?}: the cut-off leader answered linearizable reads: {:?}",
        reads.linearizable_answered
    );
    assert!(
        !reads.linearizable_refused.is_empty(),
        "{kind:?}: no linearizable read was tried on the cut-off leader"
    );
    let recovered =
        recovered.unwrap_or_else(|| panic!("{kind:?}: no write after the cut: {:?}", written.errors));
    assert!(
        recovered < 2 * ELECTION_TIMEOUT + SLACK,
        "{kind:?}: the majority wrote again only {recovered:?} after the cut"
    );
    nothing_lost(cluster, majority[0], &written, &format!("{kind:?} leader partition")).await;
    Cut { recovered, stepped_down }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_serves_no_linearizable_read_and_rejoins() {
    leader_partition(Kind::Actcd).await;
}

/// A leader steps down once it has not heard from a quorum for an election timeout (etcd's
/// CheckQuorum; openraft 0.9 has none: raft/src/cluster/check_quorum.rs), and then names no leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_steps_down() {
    let cut = leader_partition(Kind::Actcd).await;
    assert!(cut.stepped_down, "the cut-off leader still names itself leader");
}

/// The same cut on three etcd 3.4 members passes the same checks, and its leader steps down;
/// both times are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_beside_etcd() {
    let etcd = leader_partition(Kind::Etcd).await;
    assert!(etcd.stepped_down, "etcd's cut-off leader still names itself leader");
    let actcd = leader_partition(Kind::Actcd).await;
    eprintln!(
        "leader partition, cut to first write on the majority: actcd {:?} (stepped down: {}), etcd 3.4 {:?} (stepped down: {})",
        actcd.recovered, actcd.stepped_down, etcd.recovered, etcd.stepped_down
    );
}

/// A follower's link, then the leader's, made slow and lossy while clients put through every
/// member: writes go on, more slowly, nothing acknowledged is lost, and the members converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_lossy_link_slows_writes_and_loses_nothing() {
    netns::available().expect("network namespaces (run as root, with iproute2)");
    let nc = NetCluster::start(Kind::Actcd, 3, 0, &[]).await;
    let cluster = &nc.cluster;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let endpoints: Vec<(String, String)> =
        (0..3).map(|i| (format!("m{i}"), cluster.member(i).endpoint.clone())).collect();
    // 2 Mbit/s each way, 30 packets of queue, 5 % of packets dropped at random.
    let shape = Shape { rate_kbit: 2000, queue: 30, loss_percent: 5 };
    let phase = Duration::from_secs(6);

    let writers = Writers::start(&endpoints);
    tokio::time::sleep(phase).await;
    let clean = writers.finish().await;
    let mut all = Written::default();
    let mut rates = Vec::new();
    rates.push(("clean", clean.acked.len()));
    all.acked.extend(clean.acked);

    for (what, member) in
        [("follower's link slow and lossy", follower), ("leader's link slow and lossy", leader)]
    {
        nc.net.slow(member, shape);
        let writers = Writers::start(&endpoints);
        tokio::time::sleep(phase).await;
        let written = writers.finish().await;
        let dropped = nc.net.dropped(member);
        nc.net.unshape(member);
        eprintln!("slow link, {what}: {} puts acknowledged in {phase:?}, {dropped} packets dropped, client errors {:?}", written.acked.len(), written.errors);
        assert!(dropped > 0, "{what}: the shaping dropped nothing");
        assert!(
            written.acked.len() > 20,
            "{what}: writes did not go on: {} acknowledged, {:?}",
            written.acked.len(),
            written.errors
        );
        rates.push((what, written.acked.len()));
        all.acked.extend(written.acked);
    }
    let last = nothing_lost(cluster, follower, &all, "slow link").await;
    eprintln!("slow link: puts acknowledged per {phase:?} phase {rates:?}; {} in all, every one on every member, hashes equal at revision {last}", all.acked.len());
}
