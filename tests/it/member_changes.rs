//! Membership changes as etcd 3.4 makes them: each scenario runs on three etcd members and on
//! three actcd members, and every MemberAdd, MemberRemove, MemberUpdate, MemberPromote and
//! MoveLeader gets from actcd the gRPC code and message etcd gave (a Go client rebuilds its
//! typed errors from the text, so the texts are byte for byte). etcd's answers are written out
//! in each test, so the tests also say what etcd 3.4.23 does: its strict reconfiguration checks
//! (members started, members connected for 5 s), one learner at most, a learner that serves only
//! serializable reads until it is promoted, etcdctl's join lines, and a removed member that
//! stops by itself. One difference is deliberate: etcd 3.4 clears a learner's flag on
//! MemberUpdate (its bug #21694, fixed in 3.5), actcd keeps it.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::cluster_client::ClusterClient;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberPromoteRequest,
    MemberRemoveRequest, MemberUpdateRequest, MoveLeaderRequest, PutRequest, RangeRequest, StatusRequest,
};
use actcd_test_support::server::Kind;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::cluster::Cluster;
use crate::harness::{etcd_binary, etcdctl, free_port};

/// How long one call may take before the test calls it unanswered.
const CALL_WITHIN: Duration = Duration::from_secs(30);

/// etcd 3.4 refuses a MemberAdd until the member taking it has been connected to every voter
/// for 5 s (`HealthInterval`), and counts only such members as active on a MemberRemove; the
/// scenarios wait this long after their start.
const CONNECTED_FOR: Duration = Duration::from_secs(7);

/// An id no member has.
const UNKNOWN: u64 = 0x1234;

/// How long a started member may take to answer, its first election included.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// One step of a scenario: its name, the gRPC code, and the refusal's message or, for `Ok`,
/// what of the answer the test pins.
type Step = (&'static str, Code, String);

#[derive(Default)]
struct Steps(Vec<Step>);

impl Steps {
    /// Records `answer` under `name` (`ok` says what an answer shows) and hands the answer on.
    fn record<T>(
        &mut self,
        name: &'static str,
        answer: Result<T, Status>,
        ok: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        match answer {
            Ok(t) => {
                self.0.push((name, Code::Ok, ok(&t)));
                Some(t)
            }
            Err(s) => {
                self.0.push((name, s.code(), s.message().to_owned()));
                None
            }
        }
    }

    /// Records a finding that is no call's answer.
    fn note(&mut self, name: &'static str, what: String) {
        self.0.push((name, Code::Ok, what));
    }
}

/// Fails listing every step where `got` differs from `want`.
fn assert_steps(who: &str, got: &[Step], want: &[(&str, Code, &str)]) {
    let mut diffs = Vec::new();
    for i in 0..got.len().max(want.len()) {
        let g = got.get(i).map(|(n, c, m)| (*n, *c, m.as_str()));
        let w = want.get(i).copied();
        if g != w {
            diffs.push(format!("  step {i}\n    got  {g:?}\n    want {w:?}"));
        }
    }
    assert!(
        diffs.is_empty(),
        "{who}: {} steps differ:\n{}\nall steps: {got:#?}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// `got` against the steps etcd took.
fn assert_same_steps(who: &str, got: &[Step], etcd: &[Step]) {
    let want: Vec<(&str, Code, &str)> = etcd.iter().map(|(n, c, m)| (*n, *c, m.as_str())).collect();
    assert_steps(who, got, &want);
}

/// A call's answer, or DeadlineExceeded once [`CALL_WITHIN`] has passed.
async fn bounded<T>(call: impl Future<Output = Result<tonic::Response<T>, Status>>) -> Result<T, Status> {
    match tokio::time::timeout(CALL_WITHIN, call).await {
        Ok(answer) => answer.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!("no answer within {CALL_WITHIN:?}"))),
    }
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn binary(kind: Kind) -> PathBuf {
    match kind {
        Kind::Actcd => PathBuf::from(env!("CARGO_BIN_EXE_actcd")),
        Kind::Etcd => etcd_binary(),
    }
}

async fn cluster_client(endpoint: &str) -> ClusterClient<Channel> {
    ClusterClient::connect(endpoint.to_owned()).await.unwrap()
}

async fn maintenance_client(endpoint: &str) -> MaintenanceClient<Channel> {
    MaintenanceClient::connect(endpoint.to_owned()).await.unwrap()
}

fn add(peer: &str, is_learner: bool) -> MemberAddRequest {
    MemberAddRequest { peer_ur_ls: vec![peer.to_owned()], is_learner }
}

fn remove(id: u64) -> MemberRemoveRequest {
    MemberRemoveRequest { id }
}

fn promote(id: u64) -> MemberPromoteRequest {
    MemberPromoteRequest { id }
}

/// A MoveLeader with a deadline the server sees (etcd waits for the new leader until the
/// request's context ends, and without a deadline it never does).
fn move_leader(target_id: u64, within: Duration) -> tonic::Request<MoveLeaderRequest> {
    let mut request = tonic::Request::new(MoveLeaderRequest { target_id });
    request.set_timeout(within);
    request
}

/// MoveLeader with a deadline that only the server keeps, over raw HTTP/2: tonic, like grpc-go,
/// gives up at the deadline it sends, before etcd's answer to that deadline can arrive.
async fn move_leader_raw(address: &str, target_id: u64, deadline: Duration) -> Result<(), Status> {
    use prost::Message;
    let io = |e: &dyn std::fmt::Display| Status::unavailable(format!("HTTP/2: {e}"));
    let call = async {
        let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| io(&e))?;
        let (client, connection) = h2::client::handshake(tcp).await.map_err(|e| io(&e))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut client = client.ready().await.map_err(|e| io(&e))?;
        let request = http::Request::post(format!("http://{address}/etcdserverpb.Maintenance/MoveLeader"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", format!("{}m", deadline.as_millis()))
            .body(())
            .unwrap();
        let (response, mut stream) = client.send_request(request, false).map_err(|e| io(&e))?;
        let body = MoveLeaderRequest { target_id }.encode_to_vec();
        stream.send_data(crate::hostile_frames::message(&body), true).map_err(|e| io(&e))?;
        let (parts, mut body) = response.await.map_err(|e| io(&e))?.into_parts();
        while let Some(chunk) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.map_err(|e| io(&e))?.len());
        }
        let trailers = body.trailers().await.map_err(|e| io(&e))?.unwrap_or_default();
        driver.abort();
        // A refusal comes in the trailers, or in the headers of a trailers-only answer.
        match Status::from_header_map(&trailers).or_else(|| Status::from_header_map(&parts.headers)) {
            Some(status) if status.code() != Code::Ok => Err(status),
            _ => Ok(()),
        }
    };
    match tokio::time::timeout(CALL_WITHIN, call).await {
        Ok(answer) => answer,
        Err(_) => Err(Status::deadline_exceeded(format!("no answer within {CALL_WITHIN:?}"))),
    }
}

/// What a MemberAdd answer says of the new member and the cluster (its id is random).
fn added(answer: &MemberAddResponse) -> String {
    match &answer.member {
        Some(m) => format!(
            "is_learner={} name={:?} client_urls={:?} members={}",
            m.is_learner,
            m.name,
            m.client_ur_ls,
            answer.members.len()
        ),
        None => format!("no member, members={}", answer.members.len()),
    }
}

fn count(members: &[Member]) -> String {
    format!("members={}", members.len())
}

async fn member_list(endpoint: &str) -> Result<Vec<Member>, Status> {
    let mut c = cluster_client(endpoint).await;
    bounded(c.member_list(MemberListRequest { linearizable: true })).await.map(|l| l.members)
}

/// Each running member's id, by index.
async fn member_ids(cluster: &Cluster) -> Vec<u64> {
    let mut ids = vec![0; cluster.members.len()];
    for (i, status) in cluster.statuses().await {
        ids[i] = status.header.unwrap().member_id;
    }
    ids
}

/// The member that `endpoint` says leads, by its id.
async fn leader_id(endpoint: &str) -> Result<u64, Status> {
    bounded(maintenance_client(endpoint).await.status(StatusRequest {})).await.map(|s| s.leader)
}

/// The first line of etcdctl's output that sets `variable`, unquoted.
fn env_value(out: &str, variable: &str) -> Option<String> {
    let prefix = format!("{variable}=");
    out.lines().find_map(|l| Some(l.strip_prefix(&prefix)?.trim_matches('"').to_owned()))
}

async fn put(endpoint: &str, key: &str, value: &str) -> Result<i64, Status> {
    let request = PutRequest {
        key: key.as_bytes().to_vec().into(),
        value: value.as_bytes().to_vec().into(),
        ..Default::default()
    };
    let mut kv =
        KvClient::connect(endpoint.to_owned()).await.map_err(|e| Status::unavailable(e.to_string()))?;
    bounded(kv.put(request)).await.map(|p| p.header.map_or(0, |h| h.revision))
}

async fn get(endpoint: &str, key: &str, serializable: bool) -> Result<Option<String>, Status> {
    let request = RangeRequest { key: key.as_bytes().to_vec().into(), serializable, ..Default::default() };
    let mut kv =
        KvClient::connect(endpoint.to_owned()).await.map_err(|e| Status::unavailable(e.to_string()))?;
    bounded(kv.range(request))
        .await
        .map(|r| r.kvs.first().map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
}

/// Retries `call` every 200 ms until `done` says its answer will do or `within` has passed:
/// the last answer.
async fn retry<T, F, Fut>(
    within: Duration,
    mut call: F,
    done: impl Fn(&Result<T, Status>) -> bool,
) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + within;
    loop {
        let answer = call().await;
        if done(&answer) || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A member started by hand to join a running cluster with etcdctl's lines (the shared
/// launcher waits for a linearizable Range, which a learner refuses); killed when dropped.
struct Joiner {
    child: Child,
    endpoint: String,
    log: PathBuf,
}

impl Joiner {
    /// Starts `kind` as member `name` on `dir` with `--initial-cluster-state existing`.
    fn start(kind: Kind, name: &str, dir: &Path, initial_cluster: &str, peer: &str) -> Joiner {
        let endpoint = url(free_port());
        let log = dir.with_extension("log");
        let mut cmd = Command::new(binary(kind));
        cmd.args(["--name", name, "--data-dir"]).arg(dir);
        cmd.args(["--listen-client-urls", &endpoint, "--advertise-client-urls", &endpoint]);
        cmd.args(["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]);
        cmd.args(["--initial-cluster", initial_cluster, "--initial-cluster-state", "existing"]);
        cmd.args(["--initial-cluster-token", "cluster-test", "--log-level", "info"]);
        if kind == Kind::Actcd {
            cmd.args(["--listen-metrics-urls", &url(free_port())]);
        }
        let file = std::fs::File::create(&log).unwrap();
        cmd.stdin(Stdio::null()).stdout(file.try_clone().unwrap()).stderr(file);
        Joiner { child: cmd.spawn().unwrap(), endpoint, log }
    }

    /// Its exit status once it exits by itself within `within`.
    async fn exits_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn membership_errors(kind: Kind) -> Vec<Step> {
    let cluster = Cluster::start(kind, 3, &[]).await;
    let leader = cluster.leader().await;
    let (follower, third) = ((leader + 1) % 3, (leader + 2) % 3);
    let ids = member_ids(&cluster).await;
    tokio::time::sleep(CONNECTED_FOR).await;
    let mut c = cluster_client(&cluster.member(leader).endpoint).await;
    let mut on_follower = cluster_client(&cluster.member(follower).endpoint).await;
    let mut moves = maintenance_client(&cluster.member(leader).endpoint).await;
    let mut moves_on_follower = maintenance_client(&cluster.member(follower).endpoint).await;
    let mut steps = Steps::default();

    steps.record(
        "add: a URL without a port",
        bounded(c.member_add(add("http://127.0.0.1", false))).await,
        added,
    );
    steps.record("add: an unknown scheme", bounded(c.member_add(add("foo://x:1", false))).await, added);
    let members = member_list(&cluster.member(leader).endpoint).await.unwrap();
    let taken = members.iter().find(|m| m.id == ids[follower]).unwrap().peer_ur_ls[0].clone();
    steps.record("add: a member's peer URL", bounded(c.member_add(add(&taken, false))).await, added);
    steps
        .record("remove: unknown id", bounded(c.member_remove(remove(UNKNOWN))).await, |r| count(&r.members));
    let update = MemberUpdateRequest { id: UNKNOWN, peer_ur_ls: vec![url(free_port())] };
    steps.record("update: unknown id", bounded(c.member_update(update)).await, |r| count(&r.members));
    steps.record("promote: unknown id", bounded(c.member_promote(promote(UNKNOWN))).await, |r| {
        count(&r.members)
    });
    // A follower hands a promotion to the leader (etcd over peer HTTP) and passes its refusal on.
    let answer = bounded(on_follower.member_promote(promote(UNKNOWN))).await;
    steps.record("promote: unknown id, asked of a follower", answer, |r| count(&r.members));
    let answer = bounded(c.member_promote(promote(ids[follower]))).await;
    steps.record("promote: a voter", answer, |r| count(&r.members));

    let answer = bounded(c.member_add(add(&url(free_port()), true))).await;
    let learner =
        steps.record("add: a learner", answer, added).and_then(|a| a.member).map_or(UNKNOWN, |m| m.id);
    steps.record("add: a second learner", bounded(c.member_add(add(&url(free_port()), true))).await, added);
    // The learner never started, so it has nothing of the leader's log.
    let answer = bounded(c.member_promote(promote(learner))).await;
    steps.record("promote: the learner, never started", answer, |r| count(&r.members));
    let answer = bounded(on_follower.member_promote(promote(learner))).await;
    steps.record("promote: the learner, asked of a follower", answer, |r| count(&r.members));

    let within = Duration::from_secs(5);
    let answer = bounded(moves_on_follower.move_leader(move_leader(ids[third], within))).await;
    steps.record("move leader: asked of a follower", answer, |_| String::new());
    steps.record(
        "move leader: to an unknown id",
        bounded(moves.move_leader(move_leader(UNKNOWN, within))).await,
        |_| String::new(),
    );
    steps.record(
        "move leader: to the learner",
        bounded(moves.move_leader(move_leader(learner, within))).await,
        |_| String::new(),
    );

    let update = MemberUpdateRequest { id: learner, peer_ur_ls: vec![url(free_port())] };
    steps.record("update: the learner's peer URLs", bounded(c.member_update(update)).await, |r| {
        count(&r.members)
    });
    let members = member_list(&cluster.member(leader).endpoint).await.unwrap();
    let flag = members.iter().find(|m| m.id == learner).map(|m| m.is_learner);
    steps.note(LEARNER_AFTER_UPDATE, format!("is_learner={flag:?}"));
    steps.record("remove: the learner", bounded(c.member_remove(remove(learner))).await, |r| {
        count(&r.members)
    });

    // A voter that never starts: three of four voters started, a quorum of four.
    let answer = bounded(c.member_add(add(&url(free_port()), false))).await;
    let voter = steps.record("add: a voter", answer, added).and_then(|a| a.member).map_or(UNKNOWN, |m| m.id);
    steps.record("add: a second voter", bounded(c.member_add(add(&url(free_port()), false))).await, added);
    let answer = bounded(c.member_remove(remove(voter))).await;
    steps.record("remove: the voter that never started", answer, |r| count(&r.members));

    let answer = bounded(moves.move_leader(move_leader(ids[follower], Duration::from_secs(10)))).await;
    steps.record("move leader: to a follower", answer, |_| String::new());
    let follower_endpoint = cluster.member(follower).endpoint.clone();
    let lead = retry(
        Duration::from_secs(10),
        || leader_id(&follower_endpoint),
        |l| l.as_ref().ok() == Some(&ids[follower]),
    )
    .await;
    steps.note("move leader: the follower leads", format!("{}", lead.ok() == Some(ids[follower])));
    steps.0
}

/// The step whose answer differs on purpose.
const LEARNER_AFTER_UPDATE: &str = "list: the learner after its update";

/// On a healthy cluster, asked of the leader unless said otherwise: every refusal of the
/// Cluster service and of MoveLeader, and the changes between them that succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_errors_match_etcd() {
    let etcd = membership_errors(Kind::Etcd).await;
    const BAD_URLS: &str = "etcdserver: given member URLs are invalid";
    const NOT_FOUND: &str = "etcdserver: member not found";
    const NOT_IN_SYNC: &str = "etcdserver: can only promote a learner member which is in sync with leader";
    const BAD_TRANSFEREE: &str = "etcdserver: bad leader transferee";
    use Code::{FailedPrecondition, InvalidArgument, NotFound, Ok, Unavailable};
    assert_steps(
        "etcd",
        &etcd,
        &[
            ("add: a URL without a port", InvalidArgument, BAD_URLS),
            ("add: an unknown scheme", InvalidArgument, BAD_URLS),
            ("add: a member's peer URL", FailedPrecondition, "etcdserver: Peer URLs already exists"),
            ("remove: unknown id", NotFound, NOT_FOUND),
            ("update: unknown id", NotFound, NOT_FOUND),
            ("promote: unknown id", NotFound, NOT_FOUND),
            ("promote: unknown id, asked of a follower", NotFound, NOT_FOUND),
            ("promote: a voter", FailedPrecondition, "etcdserver: can only promote a learner member"),
            ("add: a learner", Ok, r#"is_learner=true name="" client_urls=[] members=4"#),
            ("add: a second learner", FailedPrecondition, "etcdserver: too many learner members in cluster"),
            ("promote: the learner, never started", FailedPrecondition, NOT_IN_SYNC),
            ("promote: the learner, asked of a follower", FailedPrecondition, NOT_IN_SYNC),
            ("move leader: asked of a follower", FailedPrecondition, "etcdserver: not leader"),
            ("move leader: to an unknown id", FailedPrecondition, BAD_TRANSFEREE),
            ("move leader: to the learner", FailedPrecondition, BAD_TRANSFEREE),
            ("update: the learner's peer URLs", Ok, "members=4"),
            // etcd 3.4's bug #21694: the update turns the learner into a voter in etcd's
            // member list.
            (LEARNER_AFTER_UPDATE, Ok, "is_learner=Some(false)"),
            ("remove: the learner", Ok, "members=3"),
            ("add: a voter", Ok, r#"is_learner=false name="" client_urls=[] members=4"#),
            // Three started voters are a quorum of five, so the started-members check passes;
            // the voter added before never connected, so the connected-for-5-s check refuses.
            ("add: a second voter", Unavailable, "etcdserver: unhealthy cluster"),
            ("remove: the voter that never started", Ok, "members=3"),
            ("move leader: to a follower", Ok, ""),
            ("move leader: the follower leads", Ok, "true"),
        ],
    );

    let actcd = membership_errors(Kind::Actcd).await;
    // actcd keeps the learner a learner, as etcd 3.5 and later do.
    let etcd_but_the_fix: Vec<Step> =
        etcd.into_iter()
            .map(|(n, c, m)| {
                if n == LEARNER_AFTER_UPDATE {
                    (n, c, "is_learner=Some(true)".to_owned())
                } else {
                    (n, c, m)
                }
            })
            .collect();
    assert_same_steps("actcd", &actcd, &etcd_but_the_fix);
}

async fn unhealthy_refusals(kind: Kind) -> Vec<Step> {
    let mut cluster = Cluster::start(kind, 3, &[]).await;
    let leader = cluster.leader().await;
    let (down, up) = ((leader + 1) % 3, (leader + 2) % 3);
    let ids = member_ids(&cluster).await;
    tokio::time::sleep(CONNECTED_FOR).await;
    cluster.kill(down);
    // The peers' streams to a killed process break at once; a moment for the members to see it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut c = cluster_client(&cluster.member(leader).endpoint).await;
    let mut on_up = cluster_client(&cluster.member(up).endpoint).await;
    let mut steps = Steps::default();

    steps.record("add: a learner", bounded(c.member_add(add(&url(free_port()), true))).await, added);
    steps.record("add: a voter", bounded(c.member_add(add(&url(free_port()), false))).await, added);
    let answer = bounded(on_up.member_add(add(&url(free_port()), true))).await;
    steps.record("add: a learner, asked of the live follower", answer, added);
    let answer = bounded(c.member_remove(remove(ids[up]))).await;
    steps.record("remove: the live follower", answer, |r| count(&r.members));
    let answer = bounded(c.member_remove(remove(ids[leader]))).await;
    steps.record("remove: the leader, asked of itself", answer, |r| count(&r.members));
    let answer = move_leader_raw(&cluster.member(leader).address, ids[down], Duration::from_secs(3)).await;
    steps.record("move leader: to the stopped member", answer, |_| String::new());
    // A member not connected is not part of the active quorum: removing it is safe.
    let answer = bounded(c.member_remove(remove(ids[down]))).await;
    steps.record("remove: the stopped member", answer, |r| count(&r.members));
    let answer = bounded(c.member_add(add(&url(free_port()), true))).await;
    steps.record("add: a learner, the stopped member gone", answer, added);
    steps.0
}

/// With one follower stopped, asked of the leader unless said otherwise: etcd 3.4 adds nothing
/// and removes no live member, but lets the stopped one go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_cluster_refusals_match_etcd() {
    let etcd = unhealthy_refusals(Kind::Etcd).await;
    const UNHEALTHY: &str = "etcdserver: unhealthy cluster";
    use Code::{Ok, Unavailable, Unknown};
    assert_steps(
        "etcd",
        &etcd,
        &[
            // etcd 3.4 wants every voter connected for 5 s to the member taking a MemberAdd.
            ("add: a learner", Unavailable, UNHEALTHY),
            ("add: a voter", Unavailable, UNHEALTHY),
            ("add: a learner, asked of the live follower", Unavailable, UNHEALTHY),
            // Two active of three: removing an active member leaves one of two.
            ("remove: the live follower", Unavailable, UNHEALTHY),
            ("remove: the leader, asked of itself", Unavailable, UNHEALTHY),
            (
                "move leader: to the stopped member",
                Unknown,
                "etcdserver: request timed out, leader transfer took too long",
            ),
            ("remove: the stopped member", Ok, "members=2"),
            (
                "add: a learner, the stopped member gone",
                Ok,
                r#"is_learner=true name="" client_urls=[] members=3"#,
            ),
        ],
    );
    let actcd = unhealthy_refusals(Kind::Actcd).await;
    assert_same_steps("actcd", &actcd, &etcd);
}

/// A member that never counts as started: etcd 3.4 counts a member as started once it has
/// published a name, and one run with `--name ""` publishes an empty one (its client URLs
/// are published all the same). Joined as a voter, it connects like any member.
async fn join_nameless(
    kind: Kind,
    c: &mut ClusterClient<Channel>,
    dir: &Path,
    steps: &mut Steps,
) -> Option<Joiner> {
    let peer = url(free_port());
    let answer = bounded(c.member_add(add(&peer, false))).await;
    let answer = steps.record("add: the voter to run without a name", answer, added)?;
    let initial: Vec<String> = answer
        .members
        .iter()
        .map(|m| {
            format!(
                "{}={}",
                if m.peer_ur_ls == [peer.clone()] { "" } else { m.name.as_str() },
                m.peer_ur_ls[0]
            )
        })
        .collect();
    let nameless = Joiner::start(kind, "", dir, &initial.join(","), &peer);
    let read = retry(READY_WITHIN, || get(&nameless.endpoint, "k", true), Result::is_ok).await;
    steps.record("the nameless member serves", read, |_| String::new())?;
    Some(nameless)
}

async fn never_started_refusals(kind: Kind) -> Vec<Step> {
    let root = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(kind, 3, &[]).await;
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let ids = member_ids(&cluster).await;
    tokio::time::sleep(CONNECTED_FOR).await;
    let mut c = cluster_client(&cluster.member(leader).endpoint).await;
    let mut steps = Steps::default();
    let Some(nameless) = join_nameless(kind, &mut c, &root.path().join("nameless"), &mut steps).await else {
        return steps.0;
    };
    // Its peers must have been connected to it for 5 s before they take the next MemberAdd.
    tokio::time::sleep(CONNECTED_FOR).await;

    let answer = bounded(c.member_add(add(&url(free_port()), false))).await;
    let never = steps.record("add: a voter", answer, added).and_then(|a| a.member).map_or(UNKNOWN, |m| m.id);
    // Three started voters are no quorum of six.
    steps.record("add: a second voter", bounded(c.member_add(add(&url(free_port()), false))).await, added);
    // The learner check skips the started count; the voter just added never connected.
    steps.record("add: a learner", bounded(c.member_add(add(&url(free_port()), true))).await, added);
    // Removing a started voter leaves two started of four.
    let answer = bounded(c.member_remove(remove(ids[follower]))).await;
    steps.record("remove: a started follower", answer, |r| count(&r.members));
    let answer = bounded(c.member_remove(remove(never))).await;
    steps.record("remove: the voter that never started", answer, |r| count(&r.members));
    let members = member_list(&cluster.member(leader).endpoint).await.unwrap();
    let listed = members.iter().find(|m| m.client_ur_ls == [nameless.endpoint.clone()]);
    steps.note("list: the nameless member", format!("{:?}", listed.map(|m| m.name.as_str())));
    steps.0
}

/// etcd 3.4's started-members check, which a cluster whose members all published their names
/// never trips (the members of `--initial-cluster` count as started from the start, and a
/// second voter added before the first has started is refused as unhealthy): here one voter
/// has joined without a name and one has never started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_started_members_matches_etcd() {
    let etcd = never_started_refusals(Kind::Etcd).await;
    const NOT_ENOUGH: &str = "etcdserver: re-configuration failed due to not enough started members";
    use Code::{Ok, Unavailable, Unknown};
    assert_steps(
        "etcd",
        &etcd,
        &[
            (
                "add: the voter to run without a name",
                Ok,
                r#"is_learner=false name="" client_urls=[] members=4"#,
            ),
            ("the nameless member serves", Ok, ""),
            ("add: a voter", Ok, r#"is_learner=false name="" client_urls=[] members=5"#),
            ("add: a second voter", Unknown, NOT_ENOUGH),
            ("add: a learner", Unavailable, "etcdserver: unhealthy cluster"),
            ("remove: a started follower", Unknown, NOT_ENOUGH),
            ("remove: the voter that never started", Ok, "members=4"),
            ("list: the nameless member", Ok, r#"Some("")"#),
        ],
    );
    let actcd = never_started_refusals(Kind::Actcd).await;
    assert_same_steps("actcd", &actcd, &etcd);
}

/// `etcdctl member add m4` against `kind` on `peers`: its output, checked line by line against
/// the cluster it changed, with the new member's random id in place.
async fn etcdctl_member_add(kind: Kind, peers: Vec<String>, m4: &str) -> String {
    let cluster = Cluster::start_on(kind, peers, &[]).await;
    tokio::time::sleep(CONNECTED_FOR).await;
    let (ok, out, err) =
        etcdctl(cluster.member(0), &["member", "add", "m4", &format!("--peer-urls={m4}")], None);
    assert!(ok, "{kind:?}: {err}");
    let status = bounded(maintenance_client(&cluster.member(0).endpoint).await.status(StatusRequest {}))
        .await
        .unwrap();
    let cluster_id = status.header.unwrap().cluster_id;
    let mut members = member_list(&cluster.member(0).endpoint).await.unwrap();
    members.sort_by_key(|m| m.id);
    let new = members.iter().find(|m| m.peer_ur_ls == [m4.to_owned()]).unwrap().id;
    // etcdctl names the new member by its flag and the others by their names, in the order of
    // the answer's list, which is by id.
    let initial: Vec<String> = members
        .iter()
        .map(|m| format!("{}={}", if m.id == new { "m4" } else { m.name.as_str() }, m.peer_ur_ls[0]))
        .collect();
    let want = [
        format!("Member {new:16x} added to cluster {cluster_id:16x}"),
        String::new(),
        r#"ETCD_NAME="m4""#.to_owned(),
        format!("ETCD_INITIAL_CLUSTER=\"{}\"", initial.join(",")),
        format!("ETCD_INITIAL_ADVERTISE_PEER_URLS=\"{m4}\""),
        r#"ETCD_INITIAL_CLUSTER_STATE="existing""#.to_owned(),
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{kind:?}");
    // Every member by name, with its peer URL, in the initial cluster.
    let mut names: Vec<&str> = initial.iter().map(|e| e.split('=').next().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["m1", "m2", "m3", "m4"], "{kind:?}");
    out.replace(&format!("{new:16x}"), "<new member>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_member_add_prints_the_join_lines() {
    // The same peer URLs and token for both, so the same member and cluster ids.
    let peers: Vec<String> = (0..3).map(|_| url(free_port())).collect();
    let m4 = url(free_port());
    let etcd = etcdctl_member_add(Kind::Etcd, peers.clone(), &m4).await;
    let actcd = etcdctl_member_add(Kind::Actcd, peers, &m4).await;
    // The initial cluster's order follows the random id of the new member.
    let sorted = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| match l.strip_prefix("ETCD_INITIAL_CLUSTER=") {
                Some(list) => {
                    let mut entries: Vec<&str> = list.trim_matches('"').split(',').collect();
                    entries.sort_unstable();
                    entries.join(",")
                }
                None => l.to_owned(),
            })
            .collect()
    };
    assert_eq!(sorted(&actcd), sorted(&etcd));
}

/// Adds m4 with etcdctl (a learner if `learner`) through m1, starts it with etcdctl's lines and
/// waits until it serves m1's write: the cluster, m4 and the steps so far.
async fn add_and_start_m4(kind: Kind, root: &Path, learner: bool, steps: &mut Steps) -> (Cluster, Joiner) {
    let cluster = Cluster::start(kind, 3, &[]).await;
    tokio::time::sleep(CONNECTED_FOR).await;
    let peer = url(free_port());
    let mut args = vec!["member", "add", "m4"];
    if learner {
        args.push("--learner");
    }
    let flag = format!("--peer-urls={peer}");
    args.push(&flag);
    let (ok, out, err) = etcdctl(cluster.member(0), &args, None);
    assert!(ok, "{kind:?}: {err}");
    let initial = env_value(&out, "ETCD_INITIAL_CLUSTER").unwrap();
    let m4 = Joiner::start(kind, "m4", &root.join("m4"), &initial, &peer);
    put(&cluster.member(0).endpoint, "joined", "yes").await.unwrap();
    let read =
        retry(READY_WITHIN, || get(&m4.endpoint, "joined", true), |r| matches!(r, Ok(Some(v)) if v == "yes"))
            .await;
    steps.record("m4: a serializable read of m1's write", read, |v| format!("{v:?}"));
    (cluster, m4)
}

/// The id of the member named m4, once m4 has published its name and client URL.
async fn published_m4(endpoint: &str, m4: &Joiner, steps: &mut Steps) -> u64 {
    let list = retry(
        Duration::from_secs(30),
        || member_list(endpoint),
        |l| matches!(l, Ok(l) if l.iter().any(|m| m.name == "m4")),
    )
    .await;
    let list = steps.record("list: m4", list, |l| {
        let m = l.iter().find(|m| m.name == "m4");
        format!(
            "name=m4 {}",
            m.map_or("absent".to_owned(), |m| format!(
                "own client URL={} is_learner={}",
                m.client_ur_ls == [m4.endpoint.clone()],
                m.is_learner
            ))
        )
    });
    list.and_then(|l| l.into_iter().find(|m| m.name == "m4")).map_or(UNKNOWN, |m| m.id)
}

async fn join_and_leave(kind: Kind) -> Vec<Step> {
    let root = tempfile::tempdir().unwrap();
    let mut steps = Steps::default();
    let (cluster, mut m4) = add_and_start_m4(kind, root.path(), false, &mut steps).await;
    let m1 = cluster.member(0).endpoint.clone();
    let id = published_m4(&m1, &m4, &mut steps).await;
    steps.record("put on m4", put(&m4.endpoint, "from-m4", "x").await, |_| String::new());
    let answer = bounded(cluster_client(&m1).await.member_remove(remove(id))).await;
    steps.record("remove: m4", answer, |r| count(&r.members));
    // The others refuse a removed member's messages, which is how it learns it was removed.
    let exit = m4.exits_within(Duration::from_secs(30)).await;
    steps.note("m4: exits by itself", format!("{:?}", exit.map(|s| s.code())));
    let said = m4.log().contains("the member has been permanently removed from the cluster");
    steps.note("m4: logs that it was removed", format!("{said}"));
    steps.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_with_etcdctls_lines_joins_and_serves() {
    let etcd = join_and_leave(Kind::Etcd).await;
    use Code::Ok;
    assert_steps(
        "etcd",
        &etcd,
        &[
            ("m4: a serializable read of m1's write", Ok, r#"Some("yes")"#),
            ("list: m4", Ok, "name=m4 own client URL=true is_learner=false"),
            ("put on m4", Ok, ""),
            ("remove: m4", Ok, "members=3"),
            ("m4: exits by itself", Ok, "Some(Some(0))"),
            ("m4: logs that it was removed", Ok, "true"),
        ],
    );
    let actcd = join_and_leave(Kind::Actcd).await;
    assert_same_steps("actcd", &actcd, &etcd);
}

async fn learner_joins_then_promoted(kind: Kind) -> Vec<Step> {
    let root = tempfile::tempdir().unwrap();
    let mut steps = Steps::default();
    let (cluster, m4) = add_and_start_m4(kind, root.path(), true, &mut steps).await;
    let m1 = cluster.member(0).endpoint.clone();
    let id = published_m4(&m1, &m4, &mut steps).await;
    steps.record("put on the learner", put(&m4.endpoint, "k", "v").await, |_| String::new());
    steps.record("linearizable read on the learner", get(&m4.endpoint, "joined", false).await, |v| {
        format!("{v:?}")
    });
    let status = bounded(maintenance_client(&m4.endpoint).await.status(StatusRequest {})).await;
    steps.record("status of the learner", status, |s| format!("is_learner={}", s.is_learner));
    // etcd's JSON gateway is a gRPC client of its own member: the same refusal, as JSON.
    let json =
        crate::harness::http("POST", &m4.endpoint, "/v3/kv/put", r#"{"key":"aw==","value":"dg=="}"#).await;
    let refused = json.body.contains("etcdserver: rpc not supported for learner");
    steps.0.push(("gateway put on the learner", Code::Ok, format!("http {} refused={refused}", json.status)));
    // As kubeadm does: retry while the learner is behind.
    let promoted = retry(
        Duration::from_secs(20),
        || async { bounded(cluster_client(&m1).await.member_promote(promote(id))).await },
        |r| !matches!(r, Err(s) if s.message().contains("in sync with leader")),
    )
    .await;
    steps.record("promote: m4", promoted, |r| {
        format!(
            "{} is_learner={:?}",
            count(&r.members),
            r.members.iter().find(|m| m.id == id).map(|m| m.is_learner)
        )
    });
    // etcd 3.4 serves MemberList from m1's own view (the linearizable flag is 3.5's), which
    // may trail the promotion by an apply.
    let voter = |l: &Result<Vec<Member>, Status>| {
        l.as_ref().is_ok_and(|l| l.iter().any(|m| m.id == id && !m.is_learner))
    };
    let list = retry(Duration::from_secs(10), || member_list(&m1), voter).await;
    steps.record("list: m4 after its promotion", list, |l| {
        format!("is_learner={:?}", l.iter().find(|m| m.id == id).map(|m| m.is_learner))
    });
    // m4 learns of its promotion when it applies it.
    let put_after = retry(Duration::from_secs(10), || put(&m4.endpoint, "k", "v"), Result::is_ok).await;
    steps.record("put on m4 once promoted", put_after, |_| String::new());
    steps.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_add_then_promote() {
    let etcd = learner_joins_then_promoted(Kind::Etcd).await;
    const LEARNER: &str = "etcdserver: rpc not supported for learner";
    use Code::{Ok, Unavailable};
    assert_steps(
        "etcd",
        &etcd,
        &[
            ("m4: a serializable read of m1's write", Ok, r#"Some("yes")"#),
            ("list: m4", Ok, "name=m4 own client URL=true is_learner=true"),
            ("put on the learner", Unavailable, LEARNER),
            ("linearizable read on the learner", Unavailable, LEARNER),
            ("status of the learner", Ok, "is_learner=true"),
            ("gateway put on the learner", Ok, "http 503 refused=true"),
            ("promote: m4", Ok, "members=4 is_learner=Some(false)"),
            ("list: m4 after its promotion", Ok, "is_learner=Some(false)"),
            ("put on m4 once promoted", Ok, ""),
        ],
    );
    let actcd = learner_joins_then_promoted(Kind::Actcd).await;
    assert_same_steps("actcd", &actcd, &etcd);
}
