//! etcd's auth fixes of 2026, each probed through tonic clients as an attacker would send it:
//! - CVE-2026-33413 (GHSA-q8m4-xhhv-38mg, 3.4.42): MemberList, Alarm, the Lease API, Compact and
//!   the maintenance calls answered without a token; 3.4.43 relaxed MemberList and listing
//!   alarms back to any user;
//! - CVE-2026-33343 (GHSA-rfx7-8w68-q57q, 3.4.42): a Txn nested in a Txn skipped every key check;
//! - 3.4.44 / 3.5.30 / 3.6.11: a Put inside a Txn, nested or not, read a key through prev_kv and
//!   attached a lease it could not revoke;
//! - GHSA-xg4h-6gfc-h4m8 (3.5.33, 3.6.14, 3.7.1; never in 3.4): a from-key Watch (range_end
//!   `\0`) was checked as its first key alone, so a grant of that one key watched every later key.
//!
//! Debian's etcd 3.4.23 has all four open, so it cannot be the reference for the fixed answers;
//! it shows instead that each probe finds its hole (the same probes, run against it, get through).

use std::time::Duration;

use actcd_proto::authpb::{permission::Type as PermType, Permission};
use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::auth_client::AuthClient;
use actcd_proto::etcdserverpb::cluster_client::ClusterClient;
use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::request_op::Request as Op;
use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::{
    watch_request, AlarmRequest, AlarmType, AuthEnableRequest, AuthRoleAddRequest,
    AuthRoleGrantPermissionRequest, AuthUserAddRequest, AuthUserGrantRoleRequest, AuthenticateRequest,
    CompactionRequest, Compare, DeleteRangeRequest, HashKvRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, MemberListRequest, PutRequest,
    RangeRequest, RequestOp, StatusRequest, TxnRequest, WatchCreateRequest, WatchRequest, WatchResponse,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Code;

use crate::harness::Server;

/// What a call answered: nothing to report, or its status code and message.
type Outcome = Result<(), (Code, String)>;

const USER_EMPTY: (Code, &str) = (Code::InvalidArgument, "etcdserver: user name is empty");
const DENIED: (Code, &str) = (Code::PermissionDenied, "etcdserver: permission denied");
const WATCH_DENIED: &str = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";

fn refused((code, text): (Code, &str)) -> Outcome {
    Err((code, text.to_string()))
}

fn outcome<T>(answer: Result<T, tonic::Status>) -> Outcome {
    answer.map(drop).map_err(|s| (s.code(), s.message().to_string()))
}

/// `message` as a request carrying `token` (none: a caller without credentials).
fn with<T>(token: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert("token", token.parse().unwrap());
    }
    request
}

/// Auth enabled with root; alice holds READWRITE on prefix `pre/`, WRITE alone on prefix `w/`
/// and READ on the single key `one`; reader holds READ on every key. Root wrote `secret`,
/// `one`, `w/k` and `pre/a`, and granted a lease that holds `secret`.
struct Fixture {
    channel: Channel,
    root: String,
    alice: String,
    reader: String,
    root_lease: i64,
}

impl Fixture {
    async fn new(server: &Server) -> Fixture {
        let channel = Channel::from_shared(server.endpoint.clone()).unwrap().connect().await.unwrap();
        let mut auth = AuthClient::new(channel.clone());
        let user = |name: &str, password: &str| AuthUserAddRequest {
            name: name.into(),
            password: password.into(),
            ..Default::default()
        };
        auth.user_add(user("root", "rootpw")).await.unwrap();
        let root_role = AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() };
        auth.user_grant_role(root_role).await.unwrap();
        auth.auth_enable(AuthEnableRequest {}).await.unwrap();
        let root = token(&channel, "root", "rootpw").await;
        let r = Some(root.as_str());
        for (name, role, grants) in [
            (
                "alice",
                "r1",
                vec![
                    (PermType::Readwrite, "pre/", "pre0"),
                    (PermType::Write, "w/", "w0"),
                    (PermType::Read, "one", ""),
                ],
            ),
            ("reader", "all", vec![(PermType::Read, "\0", "\0")]),
        ] {
            auth.user_add(with(r, user(name, "pw"))).await.unwrap();
            auth.role_add(with(r, AuthRoleAddRequest { name: role.into() })).await.unwrap();
            for (perm_type, key, range_end) in grants {
                let perm =
                    Permission { perm_type: perm_type as i32, key: key.into(), range_end: range_end.into() };
                let grant = AuthRoleGrantPermissionRequest { name: role.into(), perm: Some(perm) };
                auth.role_grant_permission(with(r, grant)).await.unwrap();
            }
            let grant = AuthUserGrantRoleRequest { user: name.into(), role: role.into() };
            auth.user_grant_role(with(r, grant)).await.unwrap();
        }
        let grant = LeaseGrantRequest { ttl: 600, id: 0 };
        let root_lease =
            LeaseClient::new(channel.clone()).lease_grant(with(r, grant)).await.unwrap().into_inner().id;
        let mut kv = KvClient::new(channel.clone());
        for (key, lease) in [("secret", root_lease), ("one", 0), ("w/k", 0), ("pre/a", 0)] {
            let put = PutRequest { key: key.into(), value: "s".into(), lease, ..Default::default() };
            kv.put(with(r, put)).await.unwrap();
        }
        let alice = token(&channel, "alice", "pw").await;
        let reader = token(&channel, "reader", "pw").await;
        Fixture { channel, root, alice, reader, root_lease }
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
    }

    fn lease(&self) -> LeaseClient<Channel> {
        LeaseClient::new(self.channel.clone())
    }

    /// A 60 s lease granted to the holder of `token`.
    async fn grant(&self, token: Option<&str>) -> i64 {
        let grant = LeaseGrantRequest { ttl: 60, id: 0 };
        self.lease().lease_grant(with(token, grant)).await.unwrap().into_inner().id
    }

    /// `key`'s value, read as root.
    async fn value(&self, key: &'static str) -> Option<Vec<u8>> {
        let range = RangeRequest { key: key.into(), ..Default::default() };
        let kvs = self.kv().range(with(Some(&self.root), range)).await.unwrap().into_inner().kvs;
        kvs.first().map(|kv| kv.value.to_vec())
    }
}

async fn token(channel: &Channel, name: &str, password: &str) -> String {
    let req = AuthenticateRequest { name: name.into(), password: password.into() };
    AuthClient::new(channel.clone()).authenticate(req).await.unwrap().into_inner().token
}

/// One renewal of lease `id` on a keep-alive stream: its answer, or how the stream ended (a
/// refusal may come as the call's status or as the stream's first message).
async fn keep_alive(f: &Fixture, token: Option<&str>, id: i64) -> Outcome {
    let (renew, renewals) = mpsc::channel(1);
    renew.send(LeaseKeepAliveRequest { id }).await.unwrap();
    let mut answers = match f.lease().lease_keep_alive(with(token, ReceiverStream::new(renewals))).await {
        Ok(answers) => answers.into_inner(),
        Err(status) => return outcome::<()>(Err(status)),
    };
    let first = tokio::time::timeout(Duration::from_secs(10), answers.next()).await.expect("an answer");
    drop(renew);
    match first {
        Some(answer) => outcome(answer),
        None => refused((Code::Unknown, "the stream ended without an answer")),
    }
}

/// The calls GHSA-q8m4-xhhv-38mg opened, made by `token`'s holder (none: without credentials).
async fn unguarded_calls(f: &Fixture, token: Option<&str>) -> Vec<(&'static str, Outcome)> {
    let mut maintenance = MaintenanceClient::new(f.channel.clone());
    let alarm = |action: AlarmAction| AlarmRequest {
        action: action as i32,
        member_id: 0,
        alarm: AlarmType::Nospace as i32,
    };
    let time_to_live = |keys| LeaseTimeToLiveRequest { id: f.root_lease, keys };
    vec![
        (
            "MemberList",
            outcome(
                ClusterClient::new(f.channel.clone())
                    .member_list(with(token, MemberListRequest::default()))
                    .await,
            ),
        ),
        ("Alarm GET", outcome(maintenance.alarm(with(token, alarm(AlarmAction::Get))).await)),
        ("Alarm DEACTIVATE", outcome(maintenance.alarm(with(token, alarm(AlarmAction::Deactivate))).await)),
        ("Status", outcome(maintenance.status(with(token, StatusRequest {})).await)),
        (
            "LeaseGrant",
            outcome(f.lease().lease_grant(with(token, LeaseGrantRequest { ttl: 60, id: 0 })).await),
        ),
        ("LeaseTimeToLive", outcome(f.lease().lease_time_to_live(with(token, time_to_live(false))).await)),
        (
            "LeaseTimeToLive keys",
            outcome(f.lease().lease_time_to_live(with(token, time_to_live(true))).await),
        ),
        ("LeaseLeases", outcome(f.lease().lease_leases(with(token, LeaseLeasesRequest {})).await)),
        ("LeaseKeepAlive", keep_alive(f, token, f.root_lease).await),
        (
            "LeaseRevoke",
            outcome(f.lease().lease_revoke(with(token, LeaseRevokeRequest { id: f.root_lease })).await),
        ),
        (
            "Compact",
            outcome(f.kv().compact(with(token, CompactionRequest { revision: 1, physical: false })).await),
        ),
    ]
}

/// CVE-2026-33413 closed as etcd 3.4.43 closes it (3.5.28 and 3.6.9 alike): without a token
/// every one of these calls is refused; alice may list members and alarms and use her own
/// leases, but not clear an alarm, compact, or see or touch a lease that holds a key she may
/// not read or write. Status asks only for a user, as 3.5 and 3.6 do (3.4.42 on asks root).
#[tokio::test(flavor = "multi_thread")]
async fn member_list_alarm_lease_and_compact_need_a_user_or_root() {
    let actcd = Server::temp_actcd(&["--bcrypt-cost", "4"]).await;
    let f = Fixture::new(&actcd).await;

    for (call, got) in unguarded_calls(&f, None).await {
        assert_eq!(got, refused(USER_EMPTY), "{call} without a token");
    }
    let mut maintenance = MaintenanceClient::new(f.channel.clone());
    let hash = maintenance.hash_kv(with(None, HashKvRequest { revision: 0 })).await;
    assert_eq!(outcome(hash), refused((Code::Unknown, "auth: user name is empty")), "etcd's raw text");

    let alice = Some(f.alice.as_str());
    let expected = [
        ("MemberList", Ok(())),
        ("Alarm GET", Ok(())),
        ("Alarm DEACTIVATE", refused(DENIED)),
        ("Status", Ok(())),
        ("LeaseGrant", Ok(())),
        ("LeaseTimeToLive", Ok(())),
        ("LeaseTimeToLive keys", refused(DENIED)),
        ("LeaseLeases", refused(DENIED)),
        ("LeaseKeepAlive", refused(DENIED)),
        ("LeaseRevoke", refused(DENIED)),
        ("Compact", refused(DENIED)),
    ];
    let got = unguarded_calls(&f, alice).await;
    assert_eq!(got, Vec::from(expected), "alice, beside root's lease on secret");
    assert_eq!(f.value("secret").await.as_deref(), Some(&b"s"[..]), "root's lease still holds secret");

    // Her own lease on her own key: she renews, reads and revokes it.
    let id = f.grant(alice).await;
    let put = PutRequest { key: "pre/leased".into(), lease: id, ..Default::default() };
    f.kv().put(with(alice, put)).await.unwrap();
    assert_eq!(keep_alive(&f, alice, id).await, Ok(()));
    let ttl = f.lease().lease_time_to_live(with(alice, LeaseTimeToLiveRequest { id, keys: true })).await;
    assert_eq!(ttl.unwrap().into_inner().keys, [&b"pre/leased"[..]]);
    f.lease().lease_revoke(with(alice, LeaseRevokeRequest { id })).await.unwrap();

    // Root may do all of it; once root's lease is gone, alice may list the leases.
    let root = Some(f.root.as_str());
    let got = unguarded_calls(&f, root).await;
    assert!(got.iter().all(|(_, o)| o.is_ok()), "{got:?}");
    let leases = f.lease().lease_leases(with(alice, LeaseLeasesRequest {})).await;
    assert!(leases.is_ok(), "{leases:?}");
}

fn put_op(key: &'static str, prev_kv: bool, lease: i64) -> RequestOp {
    let put = PutRequest { key: key.into(), value: "stolen".into(), prev_kv, lease, ..Default::default() };
    RequestOp { request: Some(Op::RequestPut(put)) }
}

fn range_op(key: &'static str, range_end: &'static str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            key: key.into(),
            range_end: range_end.into(),
            ..Default::default()
        })),
    }
}

fn delete_op(key: &'static str, range_end: &'static str, prev_kv: bool) -> RequestOp {
    let delete = DeleteRangeRequest { key: key.into(), range_end: range_end.into(), prev_kv };
    RequestOp { request: Some(Op::RequestDeleteRange(delete)) }
}

fn txn_op(txn: TxnRequest) -> RequestOp {
    RequestOp { request: Some(Op::RequestTxn(txn)) }
}

/// A compare that `key`'s value is `value`.
fn value_is(key: &'static str, value: &'static str) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Value as i32,
        key: key.into(),
        target_union: Some(TargetUnion::Value(value.into())),
        ..Default::default()
    }
}

fn then(ops: Vec<RequestOp>) -> TxnRequest {
    TxnRequest { success: ops, ..Default::default() }
}

/// Alice's txns that reach past her grants, each only through a Put inside a Txn or a Txn
/// inside a Txn, with what each answered her.
async fn txn_probes(f: &Fixture) -> Vec<(&'static str, Outcome)> {
    let lease = f.root_lease;
    let probes = [
        ("nested put", then(vec![txn_op(then(vec![put_op("secret", false, 0)]))])),
        ("nested range", then(vec![txn_op(then(vec![range_op("secret", "")]))])),
        (
            "nested compare",
            then(vec![txn_op(TxnRequest {
                compare: vec![value_is("secret", "s")],
                ..then(vec![put_op("pre/p", false, 0)])
            })]),
        ),
        (
            "nested txn in the branch not taken",
            TxnRequest {
                compare: vec![value_is("pre/a", "s")],
                failure: vec![txn_op(TxnRequest {
                    failure: vec![delete_op("secret", "", false)],
                    ..Default::default()
                })],
                ..Default::default()
            },
        ),
        ("three deep", then(vec![txn_op(then(vec![txn_op(then(vec![range_op("\0", "\0")]))]))])),
        ("put prev_kv in a txn", then(vec![put_op("w/k", true, 0)])),
        ("nested put prev_kv", then(vec![txn_op(then(vec![put_op("w/k", true, 0)]))])),
        ("nested delete prev_kv", then(vec![txn_op(then(vec![delete_op("w/", "w0", true)]))])),
        ("put lease in a txn", then(vec![put_op("pre/leased", false, lease)])),
        ("nested put lease", then(vec![txn_op(then(vec![put_op("pre/leased", false, lease)]))])),
    ];
    let mut outcomes = Vec::new();
    for (name, txn) in probes {
        outcomes.push((name, outcome(f.kv().txn(with(Some(&f.alice), txn)).await)));
    }
    outcomes
}

/// CVE-2026-33343 and 3.4.44's prev_kv and lease fix: every compare and every op of both
/// branches is checked, however deep the nesting, and a Put anywhere in a txn needs READ for
/// prev_kv and WRITE on the keys of the lease it attaches, as a lone Put does.
#[tokio::test(flavor = "multi_thread")]
async fn nested_txns_and_puts_in_txns_are_checked_as_lone_requests() {
    let actcd = Server::temp_actcd(&["--bcrypt-cost", "4"]).await;
    let f = Fixture::new(&actcd).await;

    for (probe, got) in txn_probes(&f).await {
        assert_eq!(got, refused(DENIED), "{probe}");
    }
    assert_eq!(f.value("secret").await.as_deref(), Some(&b"s"[..]));
    assert_eq!(f.value("w/k").await.as_deref(), Some(&b"s"[..]));
    assert_eq!(f.value("pre/leased").await, None);

    // Within her grants, nesting takes nothing away: both branches, compares, ranges, a
    // write-only put without prev_kv, and her own lease.
    let alice = Some(f.alice.as_str());
    let id = f.grant(alice).await;
    let inner = TxnRequest {
        compare: vec![value_is("pre/a", "s"), value_is("one", "s")],
        success: vec![put_op("pre/n", true, id), put_op("w/n", false, 0), range_op("pre/", "pre0")],
        failure: vec![delete_op("pre/", "pre0", true), delete_op("w/", "w0", false)],
    };
    let outer = TxnRequest { compare: vec![value_is("pre/a", "s")], ..then(vec![txn_op(inner)]) };
    let answer = f.kv().txn(with(alice, outer)).await.unwrap().into_inner();
    assert!(answer.succeeded);
    assert_eq!(f.value("pre/n").await.as_deref(), Some(&b"stolen"[..]));
}

/// Opens a watch on `[key, range_end)` as `token`'s holder and returns the stream with its
/// first answer (the create's).
async fn watch(
    f: &Fixture,
    token: &str,
    key: &'static str,
    range_end: &'static str,
) -> (mpsc::Sender<WatchRequest>, tonic::Streaming<WatchResponse>, WatchResponse) {
    let (requests, stream) = mpsc::channel(4);
    requests.send(create(key, range_end)).await.unwrap();
    let mut client = WatchClient::new(f.channel.clone());
    let mut answers =
        client.watch(with(Some(token), ReceiverStream::new(stream))).await.unwrap().into_inner();
    let first = next(&mut answers).await;
    (requests, answers, first)
}

fn create(key: &'static str, range_end: &'static str) -> WatchRequest {
    let create = WatchCreateRequest { key: key.into(), range_end: range_end.into(), ..Default::default() };
    WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) }
}

async fn next(answers: &mut tonic::Streaming<WatchResponse>) -> WatchResponse {
    let answer = tokio::time::timeout(Duration::from_secs(10), answers.next()).await;
    answer.expect("a watch answer in time").expect("the stream is open").unwrap()
}

/// GHSA-xg4h-6gfc-h4m8 closed as etcd 3.5.33 and 3.6.14 close it: a from-key watch needs READ
/// on all of `[key, ∞)`, so alice's grant of the key `one` (or of the prefix `pre/`) does not
/// watch the keys after it; the refusal leaves the stream open, where a watch within her grant
/// sees her key alone. A grant of every key still watches from the empty key.
#[tokio::test(flavor = "multi_thread")]
async fn a_from_key_watch_needs_read_on_every_later_key() {
    let actcd = Server::temp_actcd(&["--bcrypt-cost", "4"]).await;
    let f = Fixture::new(&actcd).await;

    let (requests, mut answers, first) = watch(&f, &f.alice, "one", "\0").await;
    assert!(first.created && first.canceled, "{first:?}");
    assert_eq!(first.cancel_reason, WATCH_DENIED);
    requests.send(create("pre/", "\0")).await.unwrap();
    let prefix_from = next(&mut answers).await;
    assert!(prefix_from.canceled && prefix_from.cancel_reason == WATCH_DENIED, "{prefix_from:?}");

    requests.send(create("one", "")).await.unwrap();
    let single = next(&mut answers).await;
    assert!(single.created && !single.canceled, "{single:?}");
    let root = Some(f.root.as_str());
    for key in ["one0", "onf", "one"] {
        let put = PutRequest { key: key.into(), value: "v".into(), ..Default::default() };
        f.kv().put(with(root, put)).await.unwrap();
    }
    let events = next(&mut answers).await;
    let keys: Vec<&[u8]> = events.events.iter().map(|e| e.kv.as_ref().unwrap().key.as_ref()).collect();
    assert_eq!(keys, [&b"one"[..]], "{events:?}");

    let (_requests, mut answers, first) = watch(&f, &f.reader, "", "\0").await;
    assert!(first.created && !first.canceled, "{first:?}");
    let put = PutRequest { key: "zzz".into(), value: "v".into(), ..Default::default() };
    f.kv().put(with(root, put)).await.unwrap();
    let events = next(&mut answers).await;
    assert_eq!(events.events[0].kv.as_ref().unwrap().key, b"zzz".to_vec());
}

/// The probes above are no tautology: against Debian's etcd 3.4.23, which has every hole, the
/// same calls get through.
#[tokio::test(flavor = "multi_thread")]
async fn the_probes_get_through_etcd_3_4_23() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Server::etcd_with(dir.path(), &["--bcrypt-cost", "4"]).await;
    let f = Fixture::new(&etcd).await;

    let open: Vec<&str> = unguarded_calls(&f, None)
        .await
        .into_iter()
        .filter(|(_, o)| o.is_ok())
        .map(|(call, _)| call)
        .collect();
    for call in
        ["MemberList", "Alarm GET", "Alarm DEACTIVATE", "LeaseGrant", "LeaseTimeToLive keys", "Compact"]
    {
        assert!(open.contains(&call), "{call} without a token on 3.4.23: {open:?}");
    }
    let open: Vec<&str> =
        txn_probes(&f).await.into_iter().filter(|(_, o)| o.is_ok()).map(|(probe, _)| probe).collect();
    for probe in
        ["nested put", "nested range", "put prev_kv in a txn", "nested put prev_kv", "put lease in a txn"]
    {
        assert!(open.contains(&probe), "{probe} on 3.4.23: {open:?}");
    }
    let (_requests, mut answers, first) = watch(&f, &f.alice, "one", "\0").await;
    assert!(first.created && !first.canceled, "{first:?}");
    let put = PutRequest { key: "one0".into(), value: "v".into(), ..Default::default() };
    f.kv().put(with(Some(&f.root), put)).await.unwrap();
    let leaked = next(&mut answers).await;
    assert_eq!(leaked.events[0].kv.as_ref().unwrap().key, b"one0".to_vec());
}
