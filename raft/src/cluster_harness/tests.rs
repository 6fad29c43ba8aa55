//! The Raft seams on an in-process cluster: the route to the leader, the read barrier, an
//! election after the leader is cut off, membership changes through etcd's checks, and the
//! revoke of expired leases by the leader alone.

use bytes::Bytes;

use actcd_actors::lease::leader::{LeaseRevoker, LeaseSource};
use actcd_proto::etcdserverpb::{LeaseGrantRequest, PutRequest, RangeRequest};
use actcd_store::{Command, CommandResponse, ReadView, RocksEngine, StoreError};

use super::{eventually, node, Cluster, Member, PATIENCE};
use crate::reconfig::{Change, ReconfigError};

fn put(key: &str, value: &str) -> Command {
    Command::Put(PutRequest {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::copy_from_slice(value.as_bytes()),
        ..Default::default()
    })
}

/// `key`'s value as `view` shows it now (a serializable read).
fn value_at(view: &ReadView<RocksEngine>, key: &str) -> Option<String> {
    let request = RangeRequest { key: Bytes::copy_from_slice(key.as_bytes()), ..Default::default() };
    let found = view.range(&request).expect("a range reads");
    found.kvs.first().map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
}

/// `key`'s value read linearizably at `member`.
async fn linearizable(member: &Member, key: &str) -> Result<Option<String>, StoreError> {
    member.reads.wait().await?;
    Ok(value_at(&member.view, key))
}

fn revision(answer: &CommandResponse) -> i64 {
    match answer {
        CommandResponse::Put(put) => put.header.as_ref().map_or(0, |h| h.revision),
        other => panic!("a put answered {other:?}"),
    }
}

/// The members other than `id`.
fn others(cluster: &Cluster, id: u64) -> Vec<u64> {
    cluster.members().map(|m| m.id).filter(|m| *m != id).collect()
}

/// A cluster of three, its leader and one of its followers.
async fn three() -> (Cluster, u64, u64) {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let follower = others(&cluster, leader)[0];
    (cluster, leader, follower)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_a_follower_is_forwarded_to_the_leader_and_answered_once_applied_there_too() {
    let (cluster, leader, follower) = three().await;
    // The follower learns of the entry only once the leader applied it: an answer that did not
    // wait for the follower's own apply would come before it has the write.
    cluster.net.hold(follower);
    let release = async {
        eventually("the leader applies the write", || cluster.member(leader).view.revision() > 1).await;
        cluster.net.release(follower);
    };

    let (answer, ()) = tokio::join!(cluster.member(follower).write(put("k", "v")), release);

    let answer = answer.expect("the write is applied");
    assert!(cluster.net.forwarded(follower) >= 1, "the follower forwarded the write");
    assert_eq!(cluster.net.forwarded(leader), 0, "the leader proposed it itself");
    assert_eq!(
        value_at(&cluster.member(follower).view, "k").as_deref(),
        Some("v"),
        "answered once applied on the member that took it, as etcd answers"
    );
    let all: Vec<u64> = cluster.members().map(|m| m.id).collect();
    cluster.seen_everywhere(&all, revision(&answer)).await;
    for member in cluster.members() {
        assert_eq!(value_at(&member.view, "k").as_deref(), Some("v"), "member {}", member.id);
        assert_eq!(member.view.revision(), revision(&answer), "the same revision on member {}", member.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linearizable_read_at_a_follower_sees_a_write_acknowledged_before_it() {
    let (cluster, leader, follower) = three().await;
    // Cut off while the write commits with the other two: it cannot have it by chance.
    cluster.net.cut(follower);
    cluster.member(leader).write(put("k", "v")).await.expect("the write is applied");
    assert_eq!(value_at(&cluster.member(follower).view, "k"), None, "the follower missed the write");
    cluster.net.heal(follower);

    let read = linearizable(cluster.member(follower), "k").await;

    assert_eq!(read, Ok(Some("v".into())), "the read waited for the leader's read index and its apply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_is_replaced_and_serves_no_linearizable_read() {
    let cluster = Cluster::start(3).await;
    let old = cluster.leader().await;
    cluster.member(old).write(put("k", "before")).await.expect("the write is applied");

    cluster.net.cut(old);
    let rest = others(&cluster, old);
    let new = cluster.leader_among(&rest).await;
    assert_ne!(new, old, "the others elected one of them");
    cluster.member(rest[1]).write(put("k", "after")).await.expect("the majority takes writes");
    assert_eq!(linearizable(cluster.member(rest[0]), "k").await, Ok(Some("after".into())));

    assert_eq!(cluster.member(old).leader(), Some(old), "the cut-off leader still believes it leads");
    assert_eq!(value_at(&cluster.member(old).view, "k").as_deref(), Some("before"), "its state is stale");
    let refused = linearizable(cluster.member(old), "k").await;
    assert!(refused.is_err(), "it confirms no read index without a quorum, and serves no read: {refused:?}");

    cluster.net.heal(old);
    assert_eq!(cluster.leader().await, new, "healed, it follows the new leader");
    assert_eq!(linearizable(cluster.member(old), "k").await, Ok(Some("after".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_added_after_a_snapshot_is_promoted_and_a_removed_voter_learns_it() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    cluster.member(leader).write(put("k", "before the learner")).await.expect("the write is applied");
    // A snapshot lets the whole log go: the learner can only catch up from the snapshot.
    let applied = cluster.member(leader).applied();
    cluster.member(leader).raft.trigger().snapshot().await.expect("raft runs");
    cluster
        .member(leader)
        .raft
        .wait(Some(PATIENCE))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= applied), "the log purged behind a snapshot")
        .await
        .expect("a snapshot is taken and the log purged");

    cluster.start_joining(4).await;
    let add = Change::Add { id: 4, peer_urls: node(4).peer_urls, learner: true };
    let index = cluster.reconfigure(add).await.expect("a learner is added");
    cluster.applied_everywhere(&[4], index).await;
    let learner = cluster.member(4);
    assert!(
        learner.raft.metrics().borrow().snapshot.is_some(),
        "the learner installed the leader's snapshot"
    );
    assert_eq!(value_at(&learner.view, "k").as_deref(), Some("before the learner"));
    let another = Change::Add { id: 5, peer_urls: node(5).peer_urls, learner: true };
    assert_eq!(cluster.refusal(another).await, Some(ReconfigError::TooManyLearners), "--max-learners 1");
    let publish = Change::Publish { id: 4, name: node(4).name, client_urls: Vec::new() };
    cluster.reconfigure(publish).await.expect("the learner publishes its name");
    // Promoted only once the leader saw it match the log (etcd's readiness check): under load
    // the leader's view of the learner may trail the publish above.
    cluster
        .member(leader)
        .raft
        .wait(Some(PATIENCE))
        .metrics(
            |m| {
                let matched = m.replication.as_ref().and_then(|r| r.get(&4).copied().flatten());
                matched.map(|l| l.index) >= m.last_log_index
            },
            "the learner matches the leader's log",
        )
        .await
        .expect("the learner catches up");

    let index = cluster.reconfigure(Change::Promote { id: 4 }).await.expect("the learner is promoted");
    cluster.applied_everywhere(&[1, 2, 3, 4], index).await;
    let voters = |id: u64| {
        cluster
            .member(id)
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect::<Vec<_>>()
    };
    assert_eq!(voters(leader), [1, 2, 3, 4]);

    let gone =
        others(&cluster, leader).into_iter().find(|id| *id != 4).expect("a follower of the first three");
    // Removed while cut off, as etcd removes a member that is down: it never gets the entry
    // that removes it, and learns it from its peers' refusals once it is back.
    cluster.net.cut(gone);
    let index = cluster.reconfigure(Change::Remove { id: gone }).await.expect("a voter is removed");
    let staying = others(&cluster, gone);
    cluster.applied_everywhere(&staying, index).await;
    assert!(!voters(leader).contains(&gone));
    cluster.net.heal(gone);
    tokio::time::timeout(PATIENCE, cluster.member(gone).removed.wait_for(gone))
        .await
        .expect("the removed member learns it was removed");
    assert_eq!(voters(gone), [1, 2, 3, 4], "it learned from the refusals: the entry never reached it");
    let again = Change::Add { id: gone, peer_urls: vec!["mem://elsewhere".into()], learner: true };
    assert_eq!(cluster.refusal(again).await, Some(ReconfigError::NotFound), "a removed id is gone for good");
    cluster.member(4).write(put("k", "after")).await.expect("the cluster of three takes writes");
    assert_eq!(linearizable(cluster.member(4), "k").await, Ok(Some("after".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_leader_that_still_leads_revokes_expired_leases() {
    let cluster = Cluster::start(3).await;
    let old = cluster.leader().await;
    let leases = |member: &Member| member.core.clone().list().expect("the leases read");
    let grant = Command::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 7 });
    cluster.member(old).write(grant).await.expect("the lease is granted");
    let attached =
        Command::Put(PutRequest { key: "held".into(), value: "v".into(), lease: 7, ..Default::default() });
    let attached = cluster.member(old).write(attached).await.expect("a key is attached");
    let all: Vec<u64> = cluster.members().map(|m| m.id).collect();
    cluster.seen_everywhere(&all, revision(&attached)).await;
    assert!(all.iter().all(|id| leases(cluster.member(*id)) == [(7, 60)]), "every member knows the lease");

    let follower = others(&cluster, old)[0];
    let refused = cluster.member(follower).route.revoke_expired(vec![7]).await;
    assert!(refused.is_err(), "a follower revokes nothing: {refused:?}");
    cluster.net.cut(old);
    let refused = cluster.member(old).route.revoke_expired(vec![7]).await;
    assert!(refused.is_err(), "a leader cut off from its quorum revokes nothing: {refused:?}");

    let rest = others(&cluster, old);
    let new = cluster.leader_among(&rest).await;
    let revoked = cluster.member(new).route.revoke_expired(vec![7]).await;
    assert_eq!(revoked, Ok(vec![Ok(())]), "the new leader revokes it");
    cluster.seen_everywhere(&rest, cluster.member(new).view.revision()).await;
    for id in &rest {
        assert_eq!(leases(cluster.member(*id)), [], "revoked on member {id}");
        assert_eq!(value_at(&cluster.member(*id).view, "held"), None, "its key is gone on member {id}");
    }
    assert_eq!(leases(cluster.member(old)), [(7, 60)], "nothing the cut-off leader did revoked it there");

    cluster.net.heal(old);
    eventually("the healed member applies the revoke", || leases(cluster.member(old)).is_empty()).await;
}
