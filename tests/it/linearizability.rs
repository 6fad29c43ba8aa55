//! Linearizability of a running actcd: concurrent clients over loopback record every call
//! (monotonic call and return times, request, answer), a compactor compacts behind them, and
//! watchers record what they get; then the history is checked against the sequential model
//! (history_check), the watchers against the model's events (watch_validator), and known bugs
//! injected into the recorded history and watch responses must be caught (history_bugs).
//! Once on a server that runs throughout, once across a kill -9 and restart, and once on a
//! three-member cluster whose leader is killed under the load.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tonic::transport::Channel;

use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{
    watch_request, RangeRequest, WatchCreateRequest, WatchProgressRequest, WatchResponse,
};

use crate::cluster::Cluster;
use crate::harness::Server;
use crate::history::{Clock, Op, Outcome, Request, Response, NEVER};
use crate::history_bugs::{injected_history_bugs, missed_watch_bugs, HISTORY_BUGS, WATCH_BUGS};
use crate::history_check::{check_with_hints, Verdict};
use crate::history_workload::{Workload, PREFIX, PREFIX_END};
use crate::watch_stream::RawStream;
use crate::watch_validator::{by_watch, check_bookmark, events_by_revision, expected_events, Received};

pub(crate) const CLIENTS: usize = 8;

/// A call that takes longer has an unknown outcome.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Compactions go to the revision the compactor read this many rounds (of 300 ms) before:
/// behind any watcher that keeps up (with room for a loaded machine) and any watch resumed a
/// few revisions back, but ahead of the reads of old revisions, which then get ErrCompacted.
const COMPACTION_LAG_ROUNDS: usize = 10;

/// For runs of a few seconds (each side of the kill, etcd's): a shorter lag, so that they
/// compact too.
const SHORT_RUN_LAG_ROUNDS: usize = 4;

pub(crate) async fn send(kv: &mut KvClient<Channel>, request: &Request) -> Result<Response, tonic::Status> {
    Ok(match request {
        Request::Range(r) => Response::Range(kv.range(r.clone()).await?.into_inner()),
        Request::Put(p) => Response::Put(kv.put(p.clone()).await?.into_inner()),
        Request::Delete(d) => Response::Delete(kv.delete_range(d.clone()).await?.into_inner()),
        Request::Txn(t) => Response::Txn(kv.txn(t.clone()).await?.into_inner()),
        Request::Compact(c) => Response::Compact(kv.compact(*c).await?.into_inner()),
    })
}

/// Makes one call and records it; never retried.
pub(crate) async fn timed(kv: &mut KvClient<Channel>, clock: Clock, client: usize, request: Request) -> Op {
    let call = clock.now();
    let outcome = match tokio::time::timeout(CALL_TIMEOUT, send(kv, &request)).await {
        Ok(result) => Outcome::from_result(result),
        Err(_) => Outcome::Unknown("timed out".into()),
    };
    let ret = if matches!(outcome, Outcome::Unknown(_)) { NEVER } else { clock.now() };
    Op { client, call, ret, request, outcome }
}

/// A client making calls one after another until `until`, or until one has an unknown
/// outcome (the server is gone: a client that retried could not tell what happened).
fn client(endpoint: String, id: usize, clock: Clock, until: Instant) -> JoinHandle<Vec<Op>> {
    tokio::spawn(async move {
        let Ok(mut kv) = KvClient::connect(endpoint).await else { return Vec::new() };
        let mut workload = Workload::new(id, 0x5eed);
        let mut ops = Vec::new();
        while Instant::now() < until {
            let op = timed(&mut kv, clock, id, workload.next_call()).await;
            workload.observe(&op.outcome);
            let gone = matches!(op.outcome, Outcome::Unknown(_));
            ops.push(op);
            if gone {
                break;
            }
            // Leaves the shared cores some room: thousands of calls are plenty.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ops
    })
}

/// A client of a cluster, starting on member `id % n`, pausing `pause` between calls until
/// `done()`. After a call of unknown outcome it goes on as a new client (a new id: the unknown
/// call may still take effect at any later time) on the next member, as a client library
/// fails over.
pub(crate) fn cluster_client(
    endpoints: Vec<String>,
    id: usize,
    seed: u64,
    clock: Clock,
    pause: Duration,
    done: impl Fn() -> bool + Send + 'static,
) -> JoinHandle<Vec<Op>> {
    tokio::spawn(async move {
        let mut workload = Workload::new(id, seed);
        let mut ops = Vec::new();
        let (mut as_client, mut at) = (id, id % endpoints.len());
        'connect: while !done() {
            let Ok(mut kv) = KvClient::connect(endpoints[at].clone()).await else {
                at = (at + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            while !done() {
                let op = timed(&mut kv, clock, as_client, workload.next_call()).await;
                workload.observe(&op.outcome);
                let unknown = matches!(op.outcome, Outcome::Unknown(_));
                ops.push(op);
                if unknown {
                    as_client += 1000;
                    at = (at + 1) % endpoints.len();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'connect;
                }
                tokio::time::sleep(pause).await;
            }
        }
        ops
    })
}

/// Reads the newest revision and compacts behind it, every 300 ms.
fn compactor(
    endpoint: String,
    id: usize,
    clock: Clock,
    until: Instant,
    lag_rounds: usize,
) -> JoinHandle<Vec<Op>> {
    tokio::spawn(async move {
        let Ok(mut kv) = KvClient::connect(endpoint).await else { return Vec::new() };
        let mut workload = Workload::new(id, 0xc0);
        let mut ops = Vec::new();
        let mut read_before = std::collections::VecDeque::new();
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let op = timed(&mut kv, clock, id, Workload::count_all()).await;
            workload.observe(&op.outcome);
            ops.push(op);
            read_before.push_back(workload.seen_revision);
            if read_before.len() <= lag_rounds {
                continue;
            }
            let to = read_before.pop_front().unwrap_or(1);
            let op = timed(&mut kv, clock, id, workload.compaction(to)).await;
            let gone = matches!(op.outcome, Outcome::Unknown(_));
            ops.push(op);
            if gone {
                break;
            }
        }
        ops
    })
}

/// Runs `CLIENTS` clients and a compactor (ids from `first_id`) until `until`.
async fn load(endpoint: String, first_id: usize, clock: Clock, until: Instant, lag_rounds: usize) -> Vec<Op> {
    let mut tasks: Vec<_> =
        (0..CLIENTS).map(|c| client(endpoint.clone(), first_id + c, clock, until)).collect();
    tasks.push(compactor(endpoint, first_id + CLIENTS, clock, until, lag_rounds));
    let mut ops = Vec::new();
    for task in tasks {
        ops.extend(task.await.unwrap());
    }
    ops
}

/// A watch of every key with prev_kv.
pub(crate) fn watch_all(watch_id: i64, start_revision: i64) -> WatchCreateRequest {
    WatchCreateRequest {
        key: PREFIX.into(),
        range_end: PREFIX_END.into(),
        start_revision,
        prev_kv: true,
        watch_id,
        ..Default::default()
    }
}

/// A stream's responses gathered in the background until the stream ends or a progress
/// response at `until` or later arrives.
struct Watching {
    requests: tokio::sync::mpsc::Sender<actcd_proto::etcdserverpb::WatchRequest>,
    until: tokio::sync::watch::Sender<i64>,
    /// The responses, and why the stream ended if it was not the progress response.
    reader: JoinHandle<(Vec<WatchResponse>, Option<String>)>,
}

impl Watching {
    async fn start(server: &Server, creates: Vec<WatchCreateRequest>) -> Watching {
        let mut creates = creates.into_iter();
        let mut stream = RawStream::open(server, creates.next().unwrap()).await;
        let mut seen = Vec::new();
        let created = stream.first_created(&mut seen).await;
        seen.push(created);
        for create in creates {
            let created = stream.create(create, &mut seen).await;
            seen.push(created);
        }
        let RawStream { requests, mut responses } = stream;
        let (until, until_rx) = tokio::sync::watch::channel(i64::MAX);
        let reader = tokio::spawn(async move {
            loop {
                match responses.message().await {
                    Ok(Some(r)) => {
                        let done = r.watch_id == -1
                            && r.header.as_ref().is_some_and(|h| h.revision >= *until_rx.borrow());
                        seen.push(r);
                        if done {
                            return (seen, None);
                        }
                    }
                    Ok(None) => return (seen, Some("the stream ended".to_string())),
                    Err(status) => return (seen, Some(format!("the stream failed: {status:?}"))),
                }
            }
        });
        Watching { requests, until, reader }
    }

    async fn create(&self, create: WatchCreateRequest) {
        let request = watch_request::RequestUnion::CreateRequest(create);
        self.requests
            .send(actcd_proto::etcdserverpb::WatchRequest { request_union: Some(request) })
            .await
            .unwrap();
    }

    /// Everything up to a progress response at `revision` or later (asked for until it comes:
    /// a server answers progress requests only once every watch of the stream caught up).
    async fn finish(self, revision: i64) -> Vec<WatchResponse> {
        // Fails only when the reader already ended; its result below says why.
        let _ = self.until.send(revision);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.reader.is_finished() {
            assert!(Instant::now() < deadline, "watchers did not catch up with revision {revision} in 30 s");
            let progress = watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {});
            let _ = self
                .requests
                .send(actcd_proto::etcdserverpb::WatchRequest { request_union: Some(progress) })
                .await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (responses, ended) = self.reader.await.unwrap();
        if let Some(why) = ended {
            let last = responses
                .iter()
                .flat_map(|r| &r.events)
                .last()
                .and_then(|e| e.kv.as_ref())
                .map(|kv| kv.mod_revision);
            panic!("{why} before the watchers caught up with revision {revision} (last event at {last:?})");
        }
        responses
    }

    /// What the stream got until its server died.
    async fn cut(self) -> Vec<WatchResponse> {
        tokio::time::timeout(Duration::from_secs(10), self.reader)
            .await
            .expect("the stream ends with its server")
            .unwrap()
            .0
    }
}

/// Reads every key at the end: the final state is checked too.
async fn final_read(server: &Server, clock: Clock, id: usize) -> Op {
    let mut kv = server.kv().await;
    let all = RangeRequest { key: PREFIX.into(), range_end: PREFIX_END.into(), ..Default::default() };
    let op = timed(&mut kv, clock, id, Request::Range(all)).await;
    assert!(matches!(op.outcome, Outcome::Ok(_)), "final read: {:?}", op.outcome);
    op
}

pub(crate) fn revision_of(op: &Op) -> i64 {
    match &op.outcome {
        Outcome::Ok(r) => r.revision(),
        _ => 0,
    }
}

/// Checks the history (unknown writes resolved first by what the watchers saw), prints its
/// figure, and asserts no violation.
pub(crate) fn checked(history: &[Op], watches: &[&Received], what: &str) -> Verdict {
    let started = Instant::now();
    let verdict = check_with_hints(history, &events_by_revision(watches.iter().copied()));
    let took = started.elapsed();
    assert!(verdict.violations.is_empty(), "{what}: not linearizable:\n{}", verdict.violations.join("\n"));
    let count = |f: fn(&Request) -> bool| history.iter().filter(|op| f(&op.request)).count();
    eprintln!(
        "{what}: {} calls ({} puts, {} deletes, {} txns, {} reads, {} compactions), {} checked \
         ({} ErrCompacted, {} ErrFutureRev), {} writes of unknown outcome ({} took effect), {} revisions, \
         0 violations, checked in {} ms",
        history.len(),
        count(|r| matches!(r, Request::Put(_))),
        count(|r| matches!(r, Request::Delete(_))),
        count(|r| matches!(r, Request::Txn(_))),
        count(|r| matches!(r, Request::Range(_))),
        count(|r| matches!(r, Request::Compact(_))),
        verdict.checked,
        history.iter().filter(|op| op.outcome == Outcome::Compacted).count(),
        history.iter().filter(|op| op.outcome == Outcome::FutureRevision).count(),
        verdict.unknown,
        verdict.unknown_applied,
        verdict.model.revision(),
        took.as_millis()
    );
    verdict
}

/// A recorded run that passed the checks.
struct CheckedRun {
    history: Vec<Op>,
    verdict: Verdict,
    /// The responses of the watch stream (watch 10 is every key from revision 1, with prev_kv).
    responses: Vec<WatchResponse>,
}

/// Runs the clients, the compactor and the watchers on `server` for `run`, then checks the
/// history and the watches against the model.
async fn run_and_check(server: &Server, run: Duration, lag_rounds: usize, what: &str) -> CheckedRun {
    let clock = Clock::start();
    let single =
        WatchCreateRequest { key: "k/03".into(), start_revision: 1, watch_id: 11, ..Default::default() };
    let range = WatchCreateRequest {
        key: "k/04".into(),
        range_end: "k/08".into(),
        start_revision: 1,
        prev_kv: true,
        watch_id: 12,
        ..Default::default()
    };
    let watching = Watching::start(server, vec![watch_all(10, 1), single.clone(), range.clone()]).await;

    let started = Instant::now();
    let until = started + run;
    let running = load(server.endpoint.clone(), 0, clock, until, lag_rounds);
    tokio::pin!(running);
    // Halfway, a watch resumes from 20 revisions back.
    let resumed_from = tokio::select! {
        _ = tokio::time::sleep(run / 2) => {
            let now = final_read(server, clock, 100).await;
            let from = revision_of(&now) - 20;
            watching.create(watch_all(13, from)).await;
            from
        }
        _ = &mut running => panic!("the load ended early"),
    };
    let mut history = running.await;
    let last = final_read(server, clock, 101).await;
    let final_revision = revision_of(&last);
    history.push(last);
    let responses = watching.finish(final_revision).await;
    let seconds = started.elapsed().as_secs_f64();

    let received = by_watch(&responses);
    let all = &received[&10];
    let verdict = checked(&history, &[all], &format!("{what}: {CLIENTS} clients, {seconds:.1} s"));
    let all_events = verdict.model.events_from(1);
    assert!(!all.compacted, "the watch of every key fell behind the compactions and was canceled");
    all.check_ordered_unique().unwrap();
    all.check_atomic().unwrap();
    all.check_prev_kv().unwrap();
    all.check_exact(&expected_events(&all_events, PREFIX.as_bytes(), PREFIX_END.as_bytes(), true)).unwrap();
    received[&11].check_exact(&expected_events(&all_events, &single.key, b"", false)).unwrap();
    received[&12].check_exact(&expected_events(&all_events, &range.key, &range.range_end, true)).unwrap();
    let resumed = &received[&13];
    resumed.check_atomic().unwrap();
    resumed
        .check_exact(&expected_events(
            &verdict.model.events_from(resumed_from),
            PREFIX.as_bytes(),
            PREFIX_END.as_bytes(),
            true,
        ))
        .unwrap();
    let progress = responses.iter().rposition(|r| r.watch_id == -1).unwrap();
    check_bookmark(&responses, progress, revision_of_response(&responses[progress])).unwrap();
    let events: usize = [10, 11, 12, 13].iter().map(|w| received[w].events.len()).sum();
    eprintln!(
        "{what}: 4 watches (1 resumed from revision {resumed_from}), {events} events equal to the model's"
    );
    CheckedRun { history, verdict, responses }
}

// Two threads: the watch streams are read while the clients run, as a client must: a
// watcher that falls behind the compactions is rightly canceled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_are_linearizable_and_watchers_see_the_model() {
    let server = Server::temp_actcd(&[]).await;
    let run = run_and_check(&server, Duration::from_secs(15), COMPACTION_LAG_ROUNDS, "linearizability").await;
    assert!(run.verdict.checked > 2000, "only {} calls checked", run.verdict.checked);
    for (name, report) in injected_history_bugs(&run.history, &run.verdict.model) {
        let report = report.unwrap_or_else(|| panic!("the checker missed an injected bug: {name}"));
        eprintln!("  injected {name}: {report}");
    }
    let all_events = run.verdict.model.events_from(1);
    let expected_all = expected_events(&all_events, PREFIX.as_bytes(), PREFIX_END.as_bytes(), true);
    let missed = missed_watch_bugs(&run.responses, 10, &expected_all);
    assert!(missed.is_empty(), "the watch validator missed injected bugs: {missed:?}");
    eprintln!(
        "linearizability: {} injected history bugs and {} injected watch bugs caught",
        HISTORY_BUGS.len(),
        WATCH_BUGS.len()
    );
}

/// The same run on Debian's etcd 3.4 passes the same checks: the model is etcd's semantics,
/// not actcd's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_passes_the_same_linearizability_checks() {
    let server = Server::temp_etcd(&[]).await;
    run_and_check(&server, Duration::from_secs(5), SHORT_RUN_LAG_ROUNDS, "linearizability on etcd 3.4").await;
}

fn revision_of_response(r: &WatchResponse) -> i64 {
    r.header.as_ref().map_or(0, |h| h.revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_across_kill_9_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::start();
    let mut server = Server::actcd(dir.path(), &[]).await;
    let before = Watching::start(&server, vec![watch_all(10, 1)]).await;
    let until = Instant::now() + Duration::from_secs(6);
    let before_kill = load(server.endpoint.clone(), 0, clock, until, SHORT_RUN_LAG_ROUNDS);
    tokio::pin!(before_kill);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(3)) => server.kill(),
        _ = &mut before_kill => panic!("the load ended before the kill"),
    }
    let mut history = before_kill.await;
    let seen_before = before.cut().await;
    let unknown_at_kill = history.iter().filter(|op| matches!(op.outcome, Outcome::Unknown(_))).count();

    let server = Server::actcd(dir.path(), &[]).await;
    // The highest compaction asked for before the kill (it may have happened).
    let compacted = history
        .iter()
        .filter_map(|op| match &op.request {
            Request::Compact(c) => Some(c.revision),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    let after = Watching::start(&server, vec![watch_all(10, compacted + 1)]).await;
    let until = Instant::now() + Duration::from_secs(3);
    history.extend(load(server.endpoint.clone(), 20, clock, until, SHORT_RUN_LAG_ROUNDS).await);
    let last = final_read(&server, clock, 101).await;
    let final_revision = revision_of(&last);
    history.push(last);
    let seen_after = after.finish(final_revision).await;

    let got_before = by_watch(&seen_before).remove(&10).unwrap_or_default();
    let got_after = by_watch(&seen_after).remove(&10).unwrap();
    let verdict = checked(&history, &[&got_before, &got_after], "linearizability across kill -9");
    let all_events = verdict.model.events_from(1);
    let expected = |from| {
        expected_events(&verdict.model.events_from(from), PREFIX.as_bytes(), PREFIX_END.as_bytes(), true)
    };
    assert!(!got_before.compacted && !got_after.compacted, "a watch fell behind the compactions");
    got_before.check_atomic().unwrap();
    got_before.check_prefix_of(&expected(1)).unwrap();
    got_after.check_atomic().unwrap();
    got_after.check_exact(&expected(compacted + 1)).unwrap();
    eprintln!(
        "linearizability across kill -9: {unknown_at_kill} calls cut by the kill; the watch before it got {} of {} events, \
         the watch after it {} events, all equal to the model's",
        got_before.events.len(),
        all_events.len(),
        got_after.events.len()
    );
}

/// What happens to the leader of a three-member cluster a third into the load.
#[derive(Clone, Copy, PartialEq)]
enum LeaderFault {
    /// kill -9, restarted once the load is over.
    Kill,
    /// SIGSTOP, SIGCONT a third later: it wakes up believing it leads.
    Pause,
}

/// Runs the clients on every member of a three-member cluster, with `fault` done to the leader,
/// and checks the history (linearizable reads included: a paused leader must not serve a stale
/// one) and a follower's watch.
async fn leader_fault_run(fault: LeaderFault, what: &str) {
    use actcd_test_support::server::Kind;
    let mut cluster = Cluster::start(Kind::Actcd, 3, &[]).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let clock = Clock::start();
    // The watch is on a follower that lives throughout: fed by its own apply stream.
    let watching = Watching::start(cluster.member(follower), vec![watch_all(10, 1)]).await;
    let endpoints: Vec<String> = (0..3).map(|i| cluster.member(i).endpoint.clone()).collect();
    let until = Instant::now() + Duration::from_secs(9);
    let mut tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            cluster_client(endpoints.clone(), c, 0x5eed, clock, Duration::from_millis(2), move || {
                Instant::now() >= until
            })
        })
        .collect();
    tasks.push(compactor(endpoints[follower].clone(), CLIENTS, clock, until, SHORT_RUN_LAG_ROUNDS));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let faulted_at = clock.now();
    let signal = |name: &str, pid: u32| {
        let status = std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{name} {pid}");
    };
    match fault {
        LeaderFault::Kill => cluster.kill(leader),
        LeaderFault::Pause => {
            let pid = cluster.member(leader).pid();
            signal("STOP", pid);
            tokio::time::sleep(Duration::from_secs(3)).await;
            signal("CONT", pid);
        }
    }
    let mut history = Vec::new();
    for task in tasks {
        history.extend(task.await.unwrap());
    }
    if fault == LeaderFault::Kill {
        cluster.restart(leader).await;
    }
    let mut final_revision = 0;
    for i in 0..3 {
        let read = final_read(cluster.member(i), clock, 100 + i).await;
        final_revision = final_revision.max(revision_of(&read));
        history.push(read);
    }
    let responses = watching.finish(final_revision).await;
    let got = by_watch(&responses).remove(&10).unwrap();
    let verdict = checked(&history, &[&got], what);
    assert!(!got.compacted, "the follower's watch fell behind the compactions");
    got.check_atomic().unwrap();
    got.check_exact(&expected_events(
        &verdict.model.events_from(1),
        PREFIX.as_bytes(),
        PREFIX_END.as_bytes(),
        true,
    ))
    .unwrap();
    let ok_after = |reads: bool| {
        history
            .iter()
            .filter(|op| {
                op.call > faulted_at && op.may_write() != reads && matches!(op.outcome, Outcome::Ok(_))
            })
            .count()
    };
    let (writes, reads) = (ok_after(false), ok_after(true));
    assert!(writes > 100, "only {writes} writes succeeded after the fault");
    eprintln!(
        "{what}: {writes} writes and {reads} reads acknowledged after the fault; the follower's watch got {} events, equal to the model's",
        got.events.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_across_a_leader_kill_in_a_three_member_cluster() {
    leader_fault_run(LeaderFault::Kill, "linearizability across a leader kill, 3 members").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_serves_no_stale_read() {
    leader_fault_run(LeaderFault::Pause, "linearizability across a leader's SIGSTOP, 3 members").await;
}
