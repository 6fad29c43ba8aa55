//! A short randomized history on an in-process cluster, checked for linearizability: a few
//! clients make the linearizability workload's calls (puts, deletes, txns, reads at the latest
//! and at past revisions) on the members, as a client of the server's KV service would, while
//! the leader is cut off and later let back; then the history is checked against etcd's model
//! by the same checker as the process level runs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actcd_proto::etcdserverpb::{RangeRequest, RangeResponse};
use actcd_store::apply::command::WriteRequest;
use actcd_store::mvcc::txn;
use actcd_store::{StoreConfig, StoreError};
use actcd_test_support::history::{Clock, Op, Outcome, Request, Response, NEVER};
use actcd_test_support::history_check::check;
use actcd_test_support::history_workload::{Workload, PREFIX, PREFIX_END};

use super::{Cluster, Member, REQUEST_TIMEOUT};

const CLIENTS: usize = 3;

/// Calls per client: a few hundred in all.
const CALLS: usize = 100;

/// A call that takes longer has an unknown outcome (a client gives up on it, as a client of a
/// member that lost its quorum does).
const CALL_TIMEOUT: Duration = REQUEST_TIMEOUT;

/// A write through `member`, answered as the KV service answers it.
async fn write<R: WriteRequest + Clone>(member: &Member, request: &R) -> Result<R::Response, StoreError> {
    R::response(member.write(request.clone().into_command()).await?)
}

/// `request` at `member`, as the KV service serves it: reads from the read view (after the read
/// barrier unless serializable), writes through the member's proposer.
async fn call(member: &Member, request: &Request) -> Result<Response, StoreError> {
    match request {
        Request::Range(range) => {
            if !range.serializable {
                member.reads.wait().await?;
            }
            member.view.range(range).map(Response::Range)
        }
        Request::Txn(t) if txn::is_read_only(t) => {
            if !txn::is_serializable(t) {
                member.reads.wait().await?;
            }
            member.view.read_only_txn(t, StoreConfig::default().max_txn_ops).map(Response::Txn)
        }
        Request::Txn(t) => write(member, t).await.map(Response::Txn),
        Request::Put(put) => write(member, put).await.map(Response::Put),
        Request::Delete(delete) => write(member, delete).await.map(Response::Delete),
        Request::Compact(compact) => write(member, compact).await.map(Response::Compact),
    }
}

/// Makes one call and records it; never retried.
async fn timed(member: &Member, clock: Clock, client: usize, request: Request) -> Op {
    let call_at = clock.now();
    let outcome = match tokio::time::timeout(CALL_TIMEOUT, call(member, &request)).await {
        Ok(Ok(response)) => Outcome::Ok(response),
        Ok(Err(StoreError::Compacted)) => Outcome::Compacted,
        Ok(Err(StoreError::FutureRevision)) => Outcome::FutureRevision,
        Ok(Err(err)) => Outcome::Unknown(err.to_string()),
        Err(_) => Outcome::Unknown("timed out".into()),
    };
    let ret = if matches!(outcome, Outcome::Unknown(_)) { NEVER } else { clock.now() };
    Op { client, call: call_at, ret, request, outcome }
}

/// Client `id`'s calls, starting on the `id`-th member. After a call of unknown outcome it goes
/// on as a new client (the call may still take effect at any later time) on the next member,
/// as a client library fails over.
async fn client(cluster: &Cluster, id: usize, clock: Clock, done: &AtomicUsize) -> Vec<Op> {
    let members: Vec<&Member> = cluster.members().collect();
    let mut workload = Workload::new(id, 0x5eed);
    let (mut as_client, mut at) = (id, id % members.len());
    let mut ops = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let op = timed(members[at], clock, as_client, workload.next_call()).await;
        workload.observe(&op.outcome);
        if matches!(op.outcome, Outcome::Unknown(_)) {
            as_client += 1000;
            at = (at + 1) % members.len();
        }
        ops.push(op);
        done.fetch_add(1, Ordering::Relaxed);
    }
    ops
}

/// Waits until the clients made `calls` calls in all.
async fn calls_made(done: &AtomicUsize, calls: usize) {
    while done.load(Ordering::Relaxed) < calls {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_randomized_history_across_a_leader_cut_off_is_linearizable() {
    let cluster = Cluster::start(3).await;
    let clock = Clock::start();
    let done = AtomicUsize::new(0);
    let total = CLIENTS * CALLS;
    let fault = async {
        calls_made(&done, total / 3).await;
        let old = cluster.leader().await;
        cluster.net.cut(old);
        let cut_at = clock.now();
        calls_made(&done, total * 2 / 3).await;
        cluster.net.heal(old);
        cut_at
    };
    let clients = futures::future::join_all((0..CLIENTS).map(|id| client(&cluster, id, clock, &done)));
    let (cut_at, histories) = tokio::join!(fault, clients);
    let mut history: Vec<Op> = histories.into_iter().flatten().collect();

    // Every member's final read, once the healed one follows the leader again.
    cluster.leader().await;
    let all = RangeRequest { key: PREFIX.into(), range_end: PREFIX_END.into(), ..Default::default() };
    for (i, member) in cluster.members().enumerate() {
        let read = timed(member, clock, 100 + i, Request::Range(all.clone())).await;
        assert!(
            matches!(read.outcome, Outcome::Ok(Response::Range(RangeResponse { .. }))),
            "final read: {read:?}"
        );
        history.push(read);
    }

    let verdict = check(&history);
    assert!(verdict.violations.is_empty(), "not linearizable:\n{}", verdict.violations.join("\n"));
    let acknowledged_writes_after_the_cut = history
        .iter()
        .filter(|op| op.call > cut_at && op.may_write() && matches!(op.outcome, Outcome::Ok(_)))
        .count();
    assert!(verdict.checked > total / 2, "only {} of {} calls were answered", verdict.checked, history.len());
    assert!(acknowledged_writes_after_the_cut > 0, "no write was acknowledged after the leader was cut off");
    eprintln!(
        "{} calls, {} checked, {} writes of unknown outcome ({} took effect), {} revisions, \
         {acknowledged_writes_after_the_cut} writes acknowledged after the cut",
        history.len(),
        verdict.checked,
        verdict.unknown,
        verdict.unknown_applied,
        verdict.model.revision()
    );
}
