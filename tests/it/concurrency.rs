//! The Lock and Election services through their own gRPC clients: a lock excludes and hands
//! over, goes with its holder's lease, and excludes an `etcdctl lock` on the same name (clientv3's
//! Mutex over KV, Watch and Lease) both ways; an election scripted against Debian's etcd 3.4 and
//! actcd gives the same transcript (keys, values, which calls wait, error codes and texts).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::LeaseGrantRequest;
use actcd_proto::v3electionpb::election_client::ElectionClient;
use actcd_proto::v3electionpb::{CampaignRequest, LeaderKey, LeaderRequest, ProclaimRequest, ResignRequest};
use actcd_proto::v3lockpb::lock_client::LockClient;
use actcd_proto::v3lockpb::{LockRequest, UnlockRequest};
use etcd_client::GetOptions;
use tonic::transport::Channel;

use crate::harness::{calls_in_progress, etcdctl_binary, on_etcd_then_actcd, wait_until, Server};

async fn channel(server: &Server) -> Channel {
    Channel::from_shared(server.endpoint.clone()).unwrap().connect().await.unwrap()
}

async fn grant(channel: &Channel, ttl: i64) -> i64 {
    let grant = LeaseGrantRequest { ttl, id: 0 };
    LeaseClient::new(channel.clone()).lease_grant(grant).await.unwrap().into_inner().id
}

/// Whether `call` is still waiting after `wait`; the call is returned to be awaited on.
async fn still_waiting<T: Send + 'static>(call: &mut tokio::task::JoinHandle<T>, wait: Duration) -> bool {
    tokio::time::timeout(wait, call).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_excludes_hands_over_and_goes_with_its_lease() {
    let server = Server::temp_actcd(&[]).await;
    let channel = channel(&server).await;
    let (a, b) = (grant(&channel, 60).await, grant(&channel, 60).await);
    let mut locks = LockClient::new(channel.clone());
    let held = locks.lock(LockRequest { name: "l".into(), lease: a }).await.unwrap().into_inner();
    assert_eq!(held.key, format!("l/{a:x}").into_bytes());
    // Locking again with the same lease is the same hold, at once.
    let again = locks.lock(LockRequest { name: "l".into(), lease: a }).await.unwrap().into_inner();
    assert_eq!(again.key, held.key);

    let mut other = LockClient::new(channel.clone());
    let mut waiter =
        tokio::spawn(async move { other.lock(LockRequest { name: "l".into(), lease: b }).await });
    assert!(still_waiting(&mut waiter, Duration::from_millis(700)).await, "a second holder got the lock");
    let unlocked = locks.unlock(UnlockRequest { key: held.key.clone() }).await.unwrap().into_inner();
    let got =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap().unwrap().into_inner();
    assert_eq!(got.key, format!("l/{b:x}").into_bytes());
    assert!(got.header.unwrap().revision >= unlocked.header.unwrap().revision);

    // A holder whose lease expires loses the lock to the next waiter; nobody unlocks.
    let short = grant(&channel, 2).await;
    let held = locks.lock(LockRequest { name: "m".into(), lease: short }).await.unwrap().into_inner();
    assert_eq!(held.key, format!("m/{short:x}").into_bytes());
    let mut other = LockClient::new(channel.clone());
    let started = Instant::now();
    let waiter = tokio::spawn(async move { other.lock(LockRequest { name: "m".into(), lease: b }).await });
    let got =
        tokio::time::timeout(Duration::from_secs(20), waiter).await.unwrap().unwrap().unwrap().into_inner();
    assert_eq!(got.key, format!("m/{b:x}").into_bytes());
    assert!(started.elapsed() >= Duration::from_millis(1500), "got the lock before the lease expired");

    // A lock on a lease that does not exist is refused with etcd's text; its code is Unknown,
    // as etcd's Lock service (a clientv3 client of its own KV) answers it.
    let err = locks.lock(LockRequest { name: "n".into(), lease: 12345 }).await.unwrap_err();
    assert_eq!((err.code(), err.message()), (tonic::Code::Unknown, "etcdserver: requested lease not found"));

    // A waiter that gives up leaves no key behind to take the lock later.
    let mut other = LockClient::new(channel.clone());
    let c = grant(&channel, 60).await;
    let waiter = tokio::spawn(async move { other.lock(LockRequest { name: "l".into(), lease: c }).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    waiter.abort();
    let gone = format!("l/{c:x}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut kv = server.client().await;
    while !kv.get(gone.clone(), None).await.unwrap().kvs().is_empty() {
        assert!(Instant::now() < deadline, "the abandoned waiter's key {gone} stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// etcdctl's lock (clientv3's Mutex, over KV, Watch and Lease, not the Lock service) and the
/// Lock service agree on who holds a name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcdctl_lock_and_a_lock_service_lock_exclude_each_other() {
    let server = Server::temp_actcd(&[]).await;
    let channel = channel(&server).await;
    let lease = grant(&channel, 60).await;
    let mut locks = LockClient::new(channel.clone());

    // The service holds it: etcdctl waits, then runs its command once the service unlocks.
    let held = locks.lock(LockRequest { name: "shared".into(), lease }).await.unwrap().into_inner();
    let etcdctl = |args: &[&str]| {
        Command::new(etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &server.address, "lock", "shared"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut waiting = etcdctl(&["echo", "got-it"]);
    // clientv3's Mutex puts its own key, and watches the key before it only when that one is
    // not its own: a second key under the name and an open Watch say etcdctl is waiting.
    let kv = server.client().await;
    wait_until(Duration::from_secs(10), "etcdctl to queue behind the service's lock", || {
        let mut kv = kv.clone();
        let server = &server;
        async move {
            let queued = kv.get("shared/", Some(GetOptions::new().with_prefix().with_count_only())).await;
            queued.is_ok_and(|r| r.count() == 2) && calls_in_progress(server, "Watch").await >= 1.0
        }
    })
    .await;
    assert!(waiting.try_wait().unwrap().is_none(), "etcdctl took a lock the Lock service holds");
    locks.unlock(UnlockRequest { key: held.key }).await.unwrap();
    let out = tokio::task::spawn_blocking(move || waiting.wait_with_output().unwrap()).await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("got-it"), "{out:?}");

    // etcdctl holds it: the service waits until etcdctl ends (and unlocks on SIGTERM).
    let mut holder = etcdctl(&[]);
    let mut first_line = String::new();
    {
        use std::io::BufRead;
        let stdout = holder.stdout.as_mut().unwrap();
        std::io::BufReader::new(stdout).read_line(&mut first_line).unwrap();
    }
    assert!(first_line.starts_with("shared/"), "etcdctl holds {first_line:?}");
    let mut other = LockClient::new(channel.clone());
    let mut waiter =
        tokio::spawn(async move { other.lock(LockRequest { name: "shared".into(), lease }).await });
    assert!(still_waiting(&mut waiter, Duration::from_millis(1000)).await, "the service took etcdctl's lock");
    let _ = Command::new("kill").args(["-TERM", &holder.id().to_string()]).status();
    let got =
        tokio::time::timeout(Duration::from_secs(20), waiter).await.unwrap().unwrap().unwrap().into_inner();
    assert_eq!(got.key, format!("shared/{lease:x}").into_bytes());
    let _ = holder.wait();
}

/// One scripted election as text: which calls wait, the keys (leases named A and B), values,
/// error codes and texts.
async fn election_transcript(server: &Server) -> Vec<String> {
    let channel = channel(server).await;
    let (a, b) = (grant(&channel, 60).await, grant(&channel, 60).await);
    let name = |lease: i64| {
        if lease == a {
            "A"
        } else if lease == b {
            "B"
        } else {
            "?"
        }
    };
    let shown = |key: &[u8]| {
        let key = String::from_utf8_lossy(key).into_owned();
        key.replace(&format!("{a:x}"), "A").replace(&format!("{b:x}"), "B")
    };
    let mut log = Vec::new();
    let mut e = ElectionClient::new(channel.clone());
    let err = e.leader(LeaderRequest { name: "e".into() }).await.unwrap_err();
    log.push(format!("leader of nobody: {:?} {}", err.code(), err.message()));

    let won = e.campaign(CampaignRequest { name: "e".into(), lease: a, value: "a".into() }).await.unwrap();
    let leader_a: LeaderKey = won.into_inner().leader.unwrap();
    log.push(format!("A leads: {} lease {}", shown(&leader_a.key), name(leader_a.lease)));
    let now = e.leader(LeaderRequest { name: "e".into() }).await.unwrap().into_inner().kv.unwrap();
    log.push(format!("leader: {} = {}", shown(&now.key), String::from_utf8_lossy(&now.value)));
    assert_eq!(now.create_revision, leader_a.rev);

    let mut observe = e.observe(LeaderRequest { name: "e".into() }).await.unwrap().into_inner();
    let seen = |kv: Option<actcd_proto::mvccpb::KeyValue>| {
        let kv = kv.unwrap();
        format!("observed {} = {}", shown(&kv.key), String::from_utf8_lossy(&kv.value))
    };
    log.push(seen(observe.message().await.unwrap().unwrap().kv));

    let mut eb = ElectionClient::new(channel.clone());
    let mut campaign_b = tokio::spawn(async move {
        eb.campaign(CampaignRequest { name: "e".into(), lease: b, value: "b".into() }).await
    });
    log.push(format!("B waits: {}", still_waiting(&mut campaign_b, Duration::from_millis(700)).await));

    let proclaim = ProclaimRequest { leader: Some(leader_a.clone()), value: "a2".into() };
    e.proclaim(proclaim).await.unwrap();
    log.push(seen(observe.message().await.unwrap().unwrap().kv));
    let stale = LeaderKey { rev: leader_a.rev + 100, ..leader_a.clone() };
    let err = e.proclaim(ProclaimRequest { leader: Some(stale), value: "x".into() }).await.unwrap_err();
    log.push(format!("stale proclaim: {:?} {}", err.code(), err.message()));
    let err = e.proclaim(ProclaimRequest { leader: None, value: "x".into() }).await.unwrap_err();
    log.push(format!("proclaim without leader: {:?} {}", err.code(), err.message()));
    let err = e.resign(ResignRequest { leader: None }).await.unwrap_err();
    log.push(format!("resign without leader: {:?} {}", err.code(), err.message()));

    e.resign(ResignRequest { leader: Some(leader_a.clone()) }).await.unwrap();
    let won = tokio::time::timeout(Duration::from_secs(10), campaign_b).await.unwrap().unwrap().unwrap();
    let leader_b = won.into_inner().leader.unwrap();
    log.push(format!("B leads: {} lease {}", shown(&leader_b.key), name(leader_b.lease)));
    log.push(seen(observe.message().await.unwrap().unwrap().kv));
    // Resigning twice, or an old leadership, changes nothing and is no error.
    e.resign(ResignRequest { leader: Some(leader_a) }).await.unwrap();
    let now = e.leader(LeaderRequest { name: "e".into() }).await.unwrap().into_inner().kv.unwrap();
    log.push(format!("leader: {} = {}", shown(&now.key), String::from_utf8_lossy(&now.value)));
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_goes_as_on_etcd() {
    let (on_etcd, on_actcd) = on_etcd_then_actcd(&[], &[], election_transcript).await;
    assert_eq!(on_actcd, on_etcd);
    // The transcript itself says something: A led, B waited and then led.
    assert!(on_etcd.contains(&"B waits: true".to_string()), "{on_etcd:#?}");
    assert!(on_etcd.contains(&"observed e/B = b".to_string()), "{on_etcd:#?}");
}
