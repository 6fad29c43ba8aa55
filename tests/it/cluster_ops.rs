//! A cluster an operator changes: the leader moved with MoveLeader and handed over on SIGTERM
//! with no write lost or refused, a member whose disk died replaced (removed, wiped, added
//! again, caught up) while the removed id never comes back, across restarts of every member,
//! a leader that removes itself stopping while the rest go on, and a member whose data
//! silently changed caught by etcd's corruption checks.
//! How long writes pause belongs to the benchmark; these tests print it and assert what must
//! hold: every write acknowledged, every member agreeing.

use std::path::Path;
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::cluster_client::ClusterClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{
    MemberAddRequest, MemberListRequest, MemberRemoveRequest, MoveLeaderRequest, PutRequest, RangeRequest,
    StatusRequest,
};
use actcd_test_support::server::{Kind, Launch};
use tonic::Code;

use crate::cluster::Cluster;
use crate::harness::{free_port, peer_flags, Server};

/// A client putting through one member in a loop, from 300 ms before a fault to after it.
struct Writing {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(usize, Vec<String>, Duration)>,
}

impl Writing {
    async fn start(endpoint: String) -> Self {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(writer(endpoint, stopped));
        tokio::time::sleep(Duration::from_millis(300)).await;
        Self { stop, task }
    }

    /// Stops after `more`: the puts acknowledged, the refusals, the longest put.
    async fn finish(self, more: Duration) -> (usize, Vec<String>, Duration) {
        tokio::time::sleep(more).await;
        self.stop.send(true).unwrap();
        self.task.await.unwrap()
    }
}

/// Puts through `server` until `stop` says so: how many were acknowledged, the refusals, and
/// the longest a put took.
async fn writer(server: String, stop: tokio::sync::watch::Receiver<bool>) -> (usize, Vec<String>, Duration) {
    let mut kv = actcd_proto::etcdserverpb::kv_client::KvClient::connect(server).await.unwrap();
    let (mut done, mut failures, mut longest) = (0, Vec::new(), Duration::ZERO);
    let mut i = 0u64;
    while !*stop.borrow() {
        i += 1;
        let put = PutRequest {
            key: format!("w/{i}").into_bytes().into(),
            value: b"v".to_vec().into(),
            ..Default::default()
        };
        let started = Instant::now();
        match kv.put(put).await {
            Ok(_) => done += 1,
            Err(status) => failures.push(format!("{:?}: {}", status.code(), status.message())),
        }
        longest = longest.max(started.elapsed());
    }
    (done, failures, longest)
}

async fn leader_id(server: &Server) -> (u64, u64) {
    let mut m = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
    let status = m.status(StatusRequest {}).await.unwrap().into_inner();
    (status.leader, status.header.unwrap().member_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_leader_and_a_stopping_leader_hand_over_without_a_refused_write() {
    let mut cluster = Cluster::start(Kind::Actcd, 3, &[]).await;
    let l = cluster.leader().await;
    let follower = (l + 1) % 3;
    let other = (l + 2) % 3;
    let (_, target) = leader_id(cluster.member(follower)).await;

    // Sent to a follower: etcd's refusal.
    let mut m = MaintenanceClient::connect(cluster.member(follower).endpoint.clone()).await.unwrap();
    let refused = m.move_leader(MoveLeaderRequest { target_id: target }).await.unwrap_err();
    assert_eq!((refused.code(), refused.message()), (Code::FailedPrecondition, "etcdserver: not leader"));

    // Moved while a client writes through the third member.
    let writing = Writing::start(cluster.member(other).endpoint.clone()).await;
    let mut m = MaintenanceClient::connect(cluster.member(l).endpoint.clone()).await.unwrap();
    let started = Instant::now();
    m.move_leader(MoveLeaderRequest { target_id: target }).await.unwrap();
    let took = started.elapsed();
    assert_eq!(cluster.leader().await, follower, "every member names the transferee");
    let (done, failures, longest) = writing.finish(Duration::from_millis(300)).await;
    println!("move-leader: answered in {took:?}; {done} puts, the longest {longest:?}");
    assert!(failures.is_empty(), "writes refused during the move: {failures:?}");
    assert!(cluster.log(l).contains("leadership moved"), "{}", cluster.log(l));

    // SIGTERM to the new leader: it hands over before it stops, and writes go on.
    let writing = Writing::start(cluster.member(other).endpoint.clone()).await;
    let pid = cluster.member(follower).pid();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let exited = cluster.members[follower].as_mut().unwrap().wait_exit(Duration::from_secs(20)).await;
    assert!(exited.is_some_and(|s| s.success()), "a stopped member exits with 0: {exited:?}");
    cluster.members[follower] = None;
    let (done, failures, longest) = writing.finish(Duration::from_millis(500)).await;
    println!("SIGTERM of the leader: {done} puts, the longest {longest:?}");
    assert!(failures.is_empty(), "writes refused while the leader stopped: {failures:?}");
    assert!(cluster.log(follower).contains("leadership moved"), "{}", cluster.log(follower));
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, follower);
}

/// Starts member `name` on `peer`, joining the cluster `initial` names (etcdctl member add's lines).
async fn join(dir: &Path, name: &str, peer: &str, initial: &str) -> Server {
    let state = ["--initial-cluster-state", "existing", "--initial-cluster-token", "cluster-test"];
    let flags = [&peer_flags(peer, initial)[..], &state].concat();
    let launch = Launch::new(Kind::Actcd, env!("CARGO_BIN_EXE_actcd"), dir).name(name).args(&flags);
    Server::from(launch.start(Duration::from_secs(60)).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_dead_disk_is_replaced_and_its_old_id_never_returns() {
    let mut cluster = Cluster::start(Kind::Actcd, 3, &[]).await;
    // The leader's disk dies: the member that leads next must judge the cluster's health
    // from its own view of its peers, not from the dead leader's.
    let l = cluster.leader().await;
    let name = format!("m{}", l + 1);
    let live: Vec<usize> = (0..3).filter(|i| *i != l).collect();
    let first = cluster.member(live[0]).endpoint.clone();
    let mut kv = actcd_proto::etcdserverpb::kv_client::KvClient::connect(first.clone()).await.unwrap();
    for i in 0..200 {
        let put = PutRequest {
            key: format!("k{i:03}").into_bytes().into(),
            value: vec![7; 512].into(),
            ..Default::default()
        };
        kv.put(put).await.unwrap();
    }
    let mut c = ClusterClient::connect(first.clone()).await.unwrap();
    let before = c.member_list(MemberListRequest { linearizable: true }).await.unwrap().into_inner().members;
    let dead = before.iter().find(|m| m.name == name).unwrap().id;

    // etcd's strict reconfig check counts a peer healthy after 5 s connected.
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Once the new leader has seen the dead member gone, it is not part of the active quorum
    // and may be removed.
    cluster.kill(l);
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.member_remove(MemberRemoveRequest { id: dead }).await.unwrap();
    let peer = format!("http://127.0.0.1:{}", free_port());
    let added = c
        .member_add(MemberAddRequest { peer_ur_ls: vec![peer.clone()], is_learner: false })
        .await
        .unwrap()
        .into_inner();
    let new_id = added.member.unwrap().id;
    assert_ne!(new_id, dead);
    let names: Vec<String> = added
        .members
        .iter()
        .filter(|m| m.id != new_id)
        .map(|m| format!("{}={}", m.name, m.peer_ur_ls[0]))
        .collect();
    let initial = format!("{},{name}={peer}", names.join(","));

    let dir = tempfile::tempdir().unwrap();
    let replaced = join(dir.path(), &name, &peer, &initial).await;
    // It caught up: the same keys, read from it alone.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut own =
        actcd_proto::etcdserverpb::kv_client::KvClient::connect(replaced.endpoint.clone()).await.unwrap();
    loop {
        let read = RangeRequest {
            key: b"k".to_vec().into(),
            range_end: b"l".to_vec().into(),
            serializable: true,
            count_only: true,
            ..Default::default()
        };
        if own.range(read).await.map(|r| r.into_inner().count).unwrap_or(0) == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the new member did not catch up in 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let list = c.member_list(MemberListRequest { linearizable: true }).await.unwrap().into_inner().members;
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|m| m.id != dead && !m.is_learner), "{list:?}");
    let joined = list.iter().find(|m| m.id == new_id).unwrap();
    // It published its name and client URL once it ran.
    let deadline = Instant::now() + Duration::from_secs(20);
    while c
        .member_list(MemberListRequest { linearizable: true })
        .await
        .unwrap()
        .into_inner()
        .members
        .iter()
        .find(|m| m.id == new_id)
        .is_none_or(|m| m.name != name)
    {
        assert!(Instant::now() < deadline, "the new member never published its name: {joined:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every original member restarted: the removed id stays removed.
    drop(c);
    for &i in &live {
        cluster.kill(i);
        cluster.restart(i).await;
    }
    let mut c = ClusterClient::connect(cluster.member(live[0]).endpoint.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        match c.member_list(MemberListRequest { linearizable: true }).await {
            Ok(list) => break list.into_inner().members,
            Err(status) => {
                assert!(Instant::now() < deadline, "no member list after the restarts: {status:?}")
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(list.len(), 3, "{list:?}");
    assert!(list.iter().all(|m| m.id != dead), "{list:?}");
    drop(replaced);
}

/// Changes, in member `dir`'s stopped store, every history value holding `from` to `to` (of
/// the same length): a disk that silently changed bytes RocksDB's checksums did not cover.
fn tamper(dir: &Path, from: &[u8], to: &[u8]) -> usize {
    use actcd_store::backend::engine::{Engine, Family, WriteSet};
    let engine = actcd_store::RocksEngine::open(dir).unwrap();
    let mut set = WriteSet::default();
    let mut changed = 0;
    engine
        .scan(Family::History, &[], &mut |key, value| {
            if let Some(at) = value.windows(from.len()).position(|w| w == from) {
                let mut value = value.to_vec();
                value[at..at + to.len()].copy_from_slice(to);
                set.put(Family::History, key.to_vec(), value);
                changed += 1;
            }
            Ok(true)
        })
        .unwrap();
    engine.commit(&set).unwrap();
    changed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_checks_refuse_a_start_and_raise_the_corrupt_alarm() {
    let each = vec![vec![], vec![], vec!["--experimental-initial-corrupt-check".to_string()]];
    let peers: Vec<String> = (0..3).map(|_| format!("http://127.0.0.1:{}", free_port())).collect();
    let mut cluster =
        Cluster::start_each(Kind::Actcd, peers, &["--experimental-corrupt-check-time", "1s"], each).await;
    let revision = {
        let mut kv = cluster.member(0).kv().await;
        let put = PutRequest {
            key: b"checked".to_vec().into(),
            value: b"original".to_vec().into(),
            ..Default::default()
        };
        kv.put(put).await.unwrap().into_inner().header.unwrap().revision
    };
    cluster.wait_for_equal_hashes(revision).await;

    // m2 and m3 stop; their disks change the value; m2 comes back unchecked (no quorum without it).
    cluster.kill(1);
    cluster.kill(2);
    assert_eq!(tamper(cluster.dir(1), b"original", b"tampered"), 1);
    assert_eq!(tamper(cluster.dir(2), b"original", b"tampered"), 1);
    cluster.restart(1).await;

    // m3 checks before it serves: its hash differs from m1's, so it refuses to start.
    let refused = cluster.launch(2).start(Duration::from_secs(60)).await;
    assert!(refused.is_err(), "a member whose data differs from its peers' must not start");
    let log = cluster.log(2);
    assert!(log.contains("found data inconsistency with peers"), "{log}");

    // The leader's periodic check raises CORRUPT for the member whose hash differs from its
    // own, and the cluster takes no more writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut m = MaintenanceClient::connect(cluster.member(0).endpoint.clone()).await.unwrap();
    loop {
        let alarms = m
            .alarm(actcd_proto::etcdserverpb::AlarmRequest { action: 0, member_id: 0, alarm: 0 })
            .await
            .unwrap()
            .into_inner()
            .alarms;
        if alarms.iter().any(|a| a.alarm == actcd_proto::etcdserverpb::AlarmType::Corrupt as i32) {
            break;
        }
        assert!(Instant::now() < deadline, "no CORRUPT alarm in 30 s: {alarms:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut kv = cluster.member(0).kv().await;
    let put = PutRequest { key: b"after".to_vec().into(), value: b"x".to_vec().into(), ..Default::default() };
    let refused = kv.put(put).await.unwrap_err();
    assert_eq!(refused.message(), "etcdserver: corrupt cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_removed_by_itself_exits_and_the_rest_go_on() {
    let mut cluster = Cluster::start(Kind::Actcd, 3, &[]).await;
    // Healthy by etcd's measure: every peer connected for 5 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let l = cluster.leader().await;
    let (_, me) = leader_id(cluster.member(l)).await;
    let mut c = ClusterClient::connect(cluster.member(l).endpoint.clone()).await.unwrap();
    let left = c.member_remove(MemberRemoveRequest { id: me }).await.unwrap().into_inner().members;
    assert!(left.len() == 2 && left.iter().all(|m| m.id != me), "{left:?}");
    let exited = cluster.members[l].as_mut().unwrap().wait_exit(Duration::from_secs(30)).await;
    assert!(exited.is_some_and(|s| s.success()), "the removed leader exits with 0: {exited:?}");
    cluster.members[l] = None;
    assert!(cluster.log(l).contains("the member has been permanently removed from the cluster"));
    let rest = cluster.running();
    let mut kv = cluster.member(rest[0]).kv().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let put =
            PutRequest { key: b"after".to_vec().into(), value: b"x".to_vec().into(), ..Default::default() };
        match kv.put(put).await {
            Ok(_) => break,
            Err(status) => assert!(Instant::now() < deadline, "the two left take no write: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let list = ClusterClient::connect(cluster.member(rest[1]).endpoint.clone())
        .await
        .unwrap()
        .member_list(MemberListRequest { linearizable: true })
        .await
        .unwrap()
        .into_inner()
        .members;
    assert_eq!(list.len(), 2, "{list:?}");
}
