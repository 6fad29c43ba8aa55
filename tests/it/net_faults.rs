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
            match tokio::time::timeout(CALL, kv.put(put)).await {
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
