//! etcd's auth through etcdctl, against Debian's etcd 3.4 and actcd side by side: the same
//! session of users, roles, permissions and refusals prints the same lines and exits alike on
//! both; then what 3.4.23 still allowed and later 3.4 releases refuse, on actcd alone; auth
//! state and users surviving a restart; and an auth change refusing a read or a keep-alive
//! renewal already under way.

use actcd_proto::etcdserverpb::watch_client::WatchClient;
use actcd_proto::etcdserverpb::{watch_request, WatchCreateRequest, WatchRequest};
use futures::StreamExt;

use crate::harness::{auth_token, enable_auth, etcdctl, Server, ALICE, ROOT};

/// One etcdctl call: its arguments, and what it printed that must match etcd's.
#[derive(Debug, PartialEq)]
struct Outcome {
    ok: bool,
    stdout: String,
    /// The `Error: ...` line, if any (clientv3's retry logs before it carry timestamps).
    error: Option<String>,
}

fn run(server: &Server, args: &[&str]) -> Outcome {
    let (ok, stdout, stderr) = etcdctl(server, args, None);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("Error:") || l.contains("watch was canceled"))
        .map(str::to_string);
    Outcome { ok, stdout, error }
}

/// The session: setting auth up, then alice's permitted and refused calls, then a revoke, a
/// delete and auth disabled again.
fn session() -> Vec<Vec<&'static str>> {
    vec![
        vec!["auth", "enable"],
        vec!["user", "add", "root", "--new-user-password=rootpw"],
        vec!["auth", "enable"],
        vec!["get", "foo"],
        vec!["--user=root:wrong", "get", "foo"],
        vec![ROOT, "put", "foo", "bar"],
        vec![ROOT, "put", "secret", "s"],
        vec![ROOT, "user", "add", "alice", "--new-user-password=apw"],
        vec![ROOT, "user", "add", "alice", "--new-user-password=apw"],
        vec![ROOT, "role", "add", "r1"],
        vec![ROOT, "role", "grant-permission", "r1", "read", "foo"],
        vec![ROOT, "role", "grant-permission", "--prefix", "r1", "readwrite", "pre/"],
        vec![ROOT, "role", "grant-permission", "r1", "write", "a", "c"],
        vec![ROOT, "role", "grant-permission", "r1", "write", "c", "e"],
        vec![ROOT, "user", "grant-role", "alice", "r1"],
        vec![ROOT, "user", "grant-role", "alice", "nope"],
        vec![ROOT, "role", "get", "r1"],
        vec![ROOT, "user", "get", "alice"],
        vec![ROOT, "user", "get", "alice", "--detail"],
        vec![ROOT, "user", "list"],
        vec![ROOT, "role", "list"],
        vec![ALICE, "get", "foo"],
        vec![ALICE, "put", "foo", "x"],
        vec![ALICE, "put", "pre/a", "1"],
        vec![ALICE, "get", "pre/", "--prefix"],
        vec![ALICE, "get", "", "--from-key"],
        vec![ALICE, "get", "secret"],
        vec![ALICE, "del", "b", "d"],
        vec![ALICE, "del", "b", "f"],
        vec![ALICE, "put", "pre/b", "2", "--prev-kv"],
        vec![ALICE, "user", "get", "alice"],
        vec![ALICE, "user", "get", "root"],
        vec![ALICE, "role", "get", "r1"],
        vec![ALICE, "user", "add", "mallory", "--new-user-password=m"],
        vec![ROOT, "role", "revoke-permission", "r1", "foo"],
        vec![ROOT, "role", "revoke-permission", "r1", "foo"],
        vec![ALICE, "get", "foo"],
        vec![ROOT, "user", "revoke-role", "root", "root"],
        vec![ROOT, "user", "delete", "root"],
        vec![ROOT, "role", "delete", "r1"],
        vec![ROOT, "user", "get", "alice"],
        vec![ROOT, "user", "delete", "alice"],
        vec![ALICE, "get", "pre/a"],
        vec![ROOT, "auth", "disable"],
        vec!["get", "foo"],
        vec!["--user=root:wrong", "get", "foo"],
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn etcdctl_auth_session_matches_etcd() {
    let etcd = Server::temp_etcd(&[]).await;
    // Cost 4, etcd's minimum: the session hashes and checks many passwords.
    let actcd = Server::temp_actcd(&["--bcrypt-cost", "4"]).await;
    for args in session() {
        let expected = run(&etcd, &args);
        let got = run(&actcd, &args);
        assert_eq!(got, expected, "etcdctl {args:?}");
        if args == [ROOT, "user", "grant-role", "alice", "r1"] {
            // Status and MemberList as an ordinary user: both answer (their ids differ).
            for ask in [[ALICE, "endpoint", "status"], [ALICE, "member", "list"]] {
                let (etcd_says, actcd_says) = (run(&etcd, &ask), run(&actcd, &ask));
                assert!(etcd_says.ok && actcd_says.ok, "{ask:?}: {etcd_says:?} {actcd_says:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn later_3_4_fixes_hold_and_auth_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let actcd = Server::actcd(dir.path(), &["--bcrypt-cost", "4"]).await;
    set_up(&actcd);

    // What 3.4.23 let a client without a token do, and 3.4.42 and later refuse.
    for args in
        [vec!["lease", "grant", "60"], vec!["compaction", "1"], vec!["member", "list"], vec!["alarm", "list"]]
    {
        let out = run(&actcd, &args);
        assert!(!out.ok, "{args:?} without a token: {out:?}");
        let error = out.error.unwrap_or_default();
        assert!(error.contains("etcdserver: user name is empty"), "{args:?}: {error}");
    }
    let (ok, out, err) = etcdctl(&actcd, &[ALICE, "defrag"], None);
    assert!(
        !ok && (out + &err).contains("rpc error: code = Unknown desc = auth: permission denied"),
        "defrag"
    );
    // A txn cannot write outside alice's prefix (nested txns, which 3.4.23 let through, are
    // sent in auth_2026.rs: etcdctl cannot send one).
    let (ok, _, stderr) =
        etcdctl(&actcd, &[ALICE, "txn", "--interactive=false"], Some("\nput secret stolen\n\n\n"));
    assert!(!ok && stderr.contains("permission denied"), "{stderr}");
    // A from-key watch from a key alice may read is still over keys she may not (GHSA-xg4h).
    let mut watch = WatchClient::connect(actcd.endpoint.clone()).await.unwrap();
    let token = auth_token(&actcd, "alice", "apw").await;
    let create = WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(WatchCreateRequest {
            key: "pre/".into(),
            range_end: "\0".into(),
            ..Default::default()
        })),
    };
    let mut request = tonic::Request::new(futures::stream::iter([create]));
    request.metadata_mut().insert("token", token.parse().unwrap());
    let mut responses = watch.watch(request).await.unwrap().into_inner();
    let first = responses.next().await.unwrap().unwrap();
    assert!(first.canceled && first.created);
    assert_eq!(
        first.cancel_reason,
        "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
    );

    drop(actcd);
    let actcd = Server::actcd(dir.path(), &["--bcrypt-cost", "4"]).await;
    let out = run(&actcd, &[ALICE, "get", "pre/a"]);
    assert_eq!(out.stdout, "pre/a\n1\n", "users, roles and the enabled flag survive: {out:?}");
    assert_eq!(
        run(&actcd, &["get", "pre/a"]).error.as_deref(),
        Some("Error: etcdserver: user name is empty")
    );
}

/// Root and alice (READWRITE on prefix `pre/`), a key of each, auth enabled.
fn set_up(server: &Server) {
    enable_auth(server, "readwrite", "pre/");
    for args in [[ROOT, "put", "secret", "s"], [ALICE, "put", "pre/a", "1"]] {
        let out = run(server, &args);
        assert!(out.ok, "{args:?}: {out:?}");
    }
}

/// `--auth-token jwt`: etcd's claims, signed with ES256 keys made here; the token names its
/// auth revision, so an auth change makes key checks refuse it as old; it expires with its ttl.
#[tokio::test(flavor = "multi_thread")]
async fn jwt_tokens_carry_etcds_claims_and_go_old_and_expire() {
    use actcd_proto::etcdserverpb::kv_client::KvClient;
    use actcd_proto::etcdserverpb::PutRequest;

    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let pair = rcgen::KeyPair::generate().unwrap();
    let (private, public) = (keys.path().join("jwt.key"), keys.path().join("jwt.pub"));
    std::fs::write(&private, pair.serialize_pem()).unwrap();
    std::fs::write(&public, pair.public_key_pem()).unwrap();
    let flag =
        format!("jwt,pub-key={},priv-key={},sign-method=ES256,ttl=4s", public.display(), private.display());
    let actcd = Server::actcd(dir.path(), &["--bcrypt-cost", "4", "--auth-token", &flag]).await;
    set_up(&actcd);

    let jwt = auth_token(&actcd, "alice", "apw").await;
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "header.claims.signature: {jwt}");
    let claims = base64_url(parts[1]);
    for claim in ["\"username\":\"alice\"", "\"revision\":", "\"exp\":"] {
        assert!(claims.contains(claim), "{claims}");
    }

    let mut kv = KvClient::connect(actcd.endpoint.clone()).await.unwrap();
    let put = |key: &str| {
        let mut request =
            tonic::Request::new(PutRequest { key: key.to_string().into(), ..Default::default() });
        request.metadata_mut().insert("token", jwt.parse().unwrap());
        request
    };
    kv.put(put("pre/jwt")).await.expect("a fresh token of alice writes her prefix");
    let denied = kv.put(put("secret")).await.unwrap_err();
    assert_eq!(denied.message(), "etcdserver: permission denied");

    assert!(run(&actcd, &[ROOT, "role", "add", "r2"]).ok, "an auth change");
    let old = kv.put(put("pre/jwt")).await.unwrap_err();
    assert_eq!(
        (old.code(), old.message()),
        (tonic::Code::InvalidArgument, "etcdserver: revision of auth store is old")
    );
    let out = run(&actcd, &[ALICE, "put", "pre/again", "1"]);
    assert!(out.ok, "etcdctl authenticates again on its own: {out:?}");

    let jwt = auth_token(&actcd, "alice", "apw").await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let mut request = tonic::Request::new(PutRequest { key: "pre/late".into(), ..Default::default() });
    request.metadata_mut().insert("token", jwt.parse().unwrap());
    let expired = kv.put(request).await.unwrap_err();
    assert_eq!(
        (expired.code(), expired.message()),
        (tonic::Code::Unauthenticated, "etcdserver: invalid auth token")
    );
}

/// Base64url without padding, decoded to text.
fn base64_url(text: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).unwrap();
    String::from_utf8(bytes).unwrap()
}

/// etcd's checks after serving: a range that read while an auth change landed is refused as
/// old (the next one, checked at the new revision, is answered), and a keep-alive stream is
/// asked on every renewal, so revoking the permission on the lease's key ends it.
#[tokio::test(flavor = "multi_thread")]
async fn an_auth_change_refuses_a_read_and_a_renewal_under_way() {
    use actcd_proto::etcdserverpb::kv_client::KvClient;
    use actcd_proto::etcdserverpb::lease_client::LeaseClient;
    use actcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest, PutRequest, RangeRequest};

    let dir = tempfile::tempdir().unwrap();
    // A range of a key ending in "/held" is held 2 s between its read and its answer.
    let env = "FAILPOINTS=grpc::after_range=return(2000)";
    let actcd = Server::actcd_under(&["env", env], dir.path(), &["--bcrypt-cost", "4"]).await;
    set_up(&actcd);
    let token = auth_token(&actcd, "alice", "apw").await;
    let range = || with_token(&token, RangeRequest { key: "pre/held".into(), ..Default::default() });

    let kv = KvClient::connect(actcd.endpoint.clone()).await.unwrap();
    let put = PutRequest { key: "pre/held".into(), value: "1".into(), ..Default::default() };
    kv.clone().put(with_token(&token, put)).await.unwrap();
    let held = tokio::spawn({
        let (mut kv, request) = (kv.clone(), range());
        async move { kv.range(request).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(run(&actcd, &[ROOT, "role", "add", "r2"]).ok, "an auth change while the range is held");
    let old = held.await.unwrap().unwrap_err();
    assert_eq!(
        (old.code(), old.message()),
        (tonic::Code::InvalidArgument, "etcdserver: revision of auth store is old")
    );
    let again = kv.clone().range(range()).await.expect("checked at the new revision, it is answered");
    assert_eq!(again.into_inner().kvs[0].value, &b"1"[..]);

    let mut lease = LeaseClient::connect(actcd.endpoint.clone()).await.unwrap();
    let grant = LeaseGrantRequest { ttl: 60, id: 0 };
    let id = lease.lease_grant(with_token(&token, grant)).await.unwrap().into_inner().id;
    let put = PutRequest { key: "pre/leased".into(), lease: id, ..Default::default() };
    kv.clone().put(with_token(&token, put)).await.unwrap();
    let (renew, renewals) = tokio::sync::mpsc::channel(4);
    let stream = tokio_stream::wrappers::ReceiverStream::new(renewals);
    let mut answers = lease.lease_keep_alive(with_token(&token, stream)).await.unwrap().into_inner();
    renew.send(LeaseKeepAliveRequest { id }).await.unwrap();
    assert_eq!(answers.next().await.unwrap().unwrap().ttl, 60, "alice may keep her key alive");
    let revoke = [ROOT, "role", "revoke-permission", "r1", "pre/", "--prefix"];
    assert!(run(&actcd, &revoke).ok);
    renew.send(LeaseKeepAliveRequest { id }).await.unwrap();
    let ended = answers.next().await.unwrap().unwrap_err();
    assert_eq!(
        (ended.code(), ended.message()),
        (tonic::Code::PermissionDenied, "etcdserver: permission denied")
    );
}

/// `message` as a request carrying `token`.
fn with_token<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("token", token.parse().unwrap());
    request
}
