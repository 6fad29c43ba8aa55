//! Maintenance, Cluster and Auth: HashKV on two nodes fed the same writes, defragment, the
//! NOSPACE alarm on a tiny quota, snapshot save (etcdctl) and `actcd snapshot restore`, snapshot
//! clients that go away, and the errors for what a single member cannot do, checked against
//! Debian's etcd 3.4 where it answers the same calls.

use std::io::Write;
use std::process::Command;

use etcd_client::{AlarmAction, AlarmOptions, AlarmType, Compare, CompareOp, DeleteOptions, Txn, TxnOp};
use tonic::transport::Channel;
use tonic::Code;

use actcd_proto::etcdserverpb::auth_client::AuthClient;
use actcd_proto::etcdserverpb::cluster_client::ClusterClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{
    AuthDisableRequest, AuthStatusRequest, AuthUserListRequest, AuthenticateRequest, DowngradeRequest,
    MemberListRequest, MemberPromoteRequest, MemberRemoveRequest, MemberUpdateRequest, MoveLeaderRequest,
    SnapshotRequest,
};

use crate::harness::{free_port, Server};

fn etcdctl(server: &Server, args: &[&str]) -> (bool, String, String) {
    crate::harness::etcdctl(server, args, None)
}

fn actcd_snapshot(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_actcd")).arg("snapshot").args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn grpc_error(err: etcd_client::Error) -> (Code, String) {
    match err {
        etcd_client::Error::GRpcStatus(s) => (s.code(), s.message().to_string()),
        other => panic!("not a gRPC status: {other:?}"),
    }
}

fn status_of(s: tonic::Status) -> (Code, String) {
    (s.code(), s.message().to_string())
}

async fn maintenance(server: &Server) -> MaintenanceClient<Channel> {
    MaintenanceClient::connect(server.endpoint.clone()).await.unwrap()
}

async fn cluster(server: &Server) -> ClusterClient<Channel> {
    ClusterClient::connect(server.endpoint.clone()).await.unwrap()
}

async fn auth(server: &Server) -> AuthClient<Channel> {
    AuthClient::connect(server.endpoint.clone()).await.unwrap()
}

/// The same history on any server: puts, overwrites, deletes, a txn, a compaction.
async fn feed(client: &mut etcd_client::Client) {
    for i in 0..20 {
        client.put(format!("key/{i:02}"), format!("value-{i}"), None).await.unwrap();
    }
    for i in 0..10 {
        client.put(format!("key/{i:02}"), format!("second-{i}"), None).await.unwrap();
    }
    client.delete("key/1", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    let txn = Txn::new()
        .when([Compare::version("key/00", CompareOp::Equal, 2)])
        .and_then([TxnOp::put("txn", "yes", None), TxnOp::delete("key/05", None)]);
    assert!(client.txn(txn).await.unwrap().succeeded());
    client.compact(25, None).await.unwrap();
    client.put("after", "compaction", None).await.unwrap();
}

#[tokio::test]
async fn hashkv_agrees_on_two_nodes_fed_the_same_writes() {
    let d1 = tempfile::tempdir().unwrap();
    let mut a = Server::actcd(d1.path(), &["--name", "a"]).await;
    let b = Server::temp_actcd(&["--name", "b"]).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    feed(&mut ca).await;
    feed(&mut cb).await;

    let head = ca.hash_kv(0).await.unwrap();
    let current = head.header().unwrap().revision();
    assert_eq!(current, 34);
    assert_eq!((head.compact_version(), head.hash_revision()), (25, current));
    for rev in [0, 26, 30, current] {
        let (ha, hb) = (ca.hash_kv(rev).await.unwrap(), cb.hash_kv(rev).await.unwrap());
        assert_eq!((ha.hash(), ha.compact_version()), (hb.hash(), hb.compact_version()), "rev {rev}");
    }
    assert_ne!(ca.hash_kv(26).await.unwrap().hash(), head.hash());
    assert_eq!(ca.hash().await.unwrap().hash(), cb.hash().await.unwrap().hash());

    // HashKV is etcd's own: Debian's etcd fed the same writes answers the same hashes (Hash,
    // over etcd's whole bbolt file, cannot be).
    let etcd = Server::temp_etcd(&[]).await;
    let mut ce = etcd.client().await;
    feed(&mut ce).await;
    for rev in [0, 26, 30, current] {
        let (ha, he) = (ca.hash_kv(rev).await.unwrap(), ce.hash_kv(rev).await.unwrap());
        assert_eq!((ha.hash(), ha.compact_version()), (he.hash(), he.compact_version()), "rev {rev} vs etcd");
    }
    drop(etcd);

    // etcd's errors for compacted and future revisions.
    let compacted = (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted".to_string());
    assert_eq!(grpc_error(ca.hash_kv(25).await.unwrap_err()), compacted);
    assert_eq!(grpc_error(ca.hash_kv(3).await.unwrap_err()), compacted);
    let future = (Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision".to_string());
    assert_eq!(grpc_error(ca.hash_kv(current + 1).await.unwrap_err()), future);

    // etcdctl's endpoint hashkv shows the same hash on both.
    let hashes: Vec<String> = [&a, &b]
        .iter()
        .map(|s| {
            let (ok, out, err) = etcdctl(s, &["endpoint", "hashkv"]);
            assert!(ok, "{err}");
            out.trim().rsplit(", ").next().unwrap().to_string()
        })
        .collect();
    assert_eq!(hashes[0], hashes[1]);
    assert_eq!(hashes[0], head.hash().to_string());

    // A restart rebuilds the same state; a write on one node only makes them differ.
    a.kill();
    let a = Server::actcd(d1.path(), &["--name", "a"]).await;
    let mut ca = a.client().await;
    assert_eq!(ca.hash_kv(0).await.unwrap().hash(), head.hash());
    ca.put("only-on-a", "x", None).await.unwrap();
    assert_ne!(ca.hash_kv(0).await.unwrap().hash(), cb.hash_kv(0).await.unwrap().hash());
    assert_eq!(ca.hash_kv(current).await.unwrap().hash(), cb.hash_kv(current).await.unwrap().hash());
}

#[tokio::test]
async fn defrag_compacts_the_files_and_status_reports_sizes() {
    let server = Server::temp_actcd(&[]).await;
    let mut client = server.client().await;
    let value = "v".repeat(4096);
    for i in 0..500 {
        client.put(format!("big/{i:04}"), value.clone(), None).await.unwrap();
    }
    let deleted = client.delete("big/", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    client.compact(deleted.header().unwrap().revision(), None).await.unwrap();
    let before = client.status().await.unwrap();

    let (ok, out, err) = etcdctl(&server, &["defrag"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("Finished defragmenting etcd member[{}]\n", server.address));
    client.defragment().await.unwrap();

    let after = client.status().await.unwrap();
    assert!(after.db_size() < before.db_size() / 4, "{} -> {}", before.db_size(), after.db_size());
    assert!(after.raft_used_db_size() <= after.db_size());
    assert!(after.raft_used_db_size() > 0);
    assert!(after.errors().is_empty());
    assert_eq!(client.get("big/", None).await.unwrap().count(), 0);
}

#[tokio::test]
async fn nospace_alarm_on_a_tiny_quota() {
    let dir = tempfile::tempdir().unwrap();
    let quota = "2000000";
    let mut server = Server::actcd(dir.path(), &["--quota-backend-bytes", quota]).await;
    let mut client = server.client().await;
    let member = client.status().await.unwrap().header().unwrap().member_id();
    let no_space = (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded".to_string());

    // Fill until the quota refuses a put.
    let value = "x".repeat(64 * 1024);
    let mut written: i64 = 0;
    loop {
        match client.put(format!("fill/{written:03}"), value.clone(), None).await {
            Ok(_) => written += 1,
            Err(err) => {
                assert_eq!(grpc_error(err), no_space);
                break;
            }
        }
        assert!(written < 200, "the quota never refused a put");
    }
    assert!(written > 0);

    // The alarm is raised for this member and listed as etcd lists it.
    let alarms = client.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    let listed: Vec<_> = alarms.alarms().iter().map(|a| (a.member_id(), a.alarm())).collect();
    assert_eq!(listed, [(member, AlarmType::Nospace)]);
    let (ok, out, _) = etcdctl(&server, &["alarm", "list"]);
    assert!(ok);
    assert_eq!(out, format!("memberID:{member} alarm:NOSPACE \n"));
    let status = client.status().await.unwrap();
    assert_eq!(status.errors(), [format!("memberID:{member} alarm:NOSPACE ")]);
    assert_eq!(status.db_size_quota(), quota.parse::<i64>().unwrap());

    // While it is raised: no puts, no txns that put, even tiny ones; reads, deletes, read-only
    // txns and compaction go through.
    assert_eq!(grpc_error(client.put("small", "x", None).await.unwrap_err()), no_space);
    let put_txn = Txn::new().and_then([TxnOp::put("small", "x", None)]);
    assert_eq!(grpc_error(client.txn(put_txn).await.unwrap_err()), no_space);
    let (ok, _, err) = etcdctl(&server, &["put", "small", "x"]);
    assert!(!ok && err.contains("etcdserver: mvcc: database space exceeded"), "{err}");
    assert_eq!(grpc_error(client.lease_grant(60, None).await.unwrap_err()), no_space);
    let read_txn = Txn::new().and_then([TxnOp::get("fill/000", None)]);
    assert!(client.txn(read_txn).await.unwrap().succeeded());
    assert_eq!(
        client.get("fill/", Some(etcd_client::GetOptions::new().with_prefix())).await.unwrap().count(),
        written
    );

    // The alarm survives a restart.
    server.kill();
    let server = Server::actcd(dir.path(), &["--quota-backend-bytes", quota]).await;
    let mut client = server.client().await;
    assert_eq!(grpc_error(client.put("small", "x", None).await.unwrap_err()), no_space);

    // Make room, disarm, write again.
    let deleted = client.delete("fill/", Some(DeleteOptions::new().with_prefix())).await.unwrap();
    assert_eq!(deleted.deleted(), written);
    client.compact(deleted.header().unwrap().revision(), None).await.unwrap();
    let (ok, _, err) = etcdctl(&server, &["defrag"]);
    assert!(ok, "{err}");
    let (ok, out, err) = etcdctl(&server, &["alarm", "disarm"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("memberID:{member} alarm:NOSPACE \n"));
    assert!(client.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap().alarms().is_empty());
    client.put("small", "x", None).await.unwrap();
    assert!(client.status().await.unwrap().errors().is_empty());
}

/// Alarm calls by hand, on etcd and on actcd: the same alarm lists, and the same gating.
#[tokio::test]
async fn alarms_raised_by_hand_answer_as_on_etcd() {
    let (etcd, actcd) = (Server::temp_etcd(&[]).await, Server::temp_actcd(&[]).await);
    let no_space = (Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded".to_string());
    for server in [&etcd, &actcd] {
        let mut client = server.client().await;
        let member = client.status().await.unwrap().header().unwrap().member_id();
        let with = |id: u64| {
            let mut o = AlarmOptions::new();
            o.with_member(id);
            Some(o)
        };
        let shape = |r: etcd_client::AlarmResponse| -> Vec<(u64, AlarmType)> {
            r.alarms().iter().map(|a| (a.member_id(), a.alarm())).collect()
        };

        let raised = client.alarm(AlarmAction::Activate, AlarmType::Nospace, with(member)).await.unwrap();
        assert_eq!(shape(raised), [(member, AlarmType::Nospace)], "{}", server.endpoint);
        let again = client.alarm(AlarmAction::Activate, AlarmType::Nospace, with(member)).await.unwrap();
        assert_eq!(shape(again), [(member, AlarmType::Nospace)]);
        let listed = client.alarm(AlarmAction::Get, AlarmType::Nospace, None).await.unwrap();
        assert_eq!(shape(listed), [(member, AlarmType::Nospace)]);
        let other_type = client.alarm(AlarmAction::Get, AlarmType::Corrupt, None).await.unwrap();
        assert!(shape(other_type).is_empty());
        assert_eq!(
            grpc_error(client.put("k", "v", None).await.unwrap_err()),
            no_space,
            "{}",
            server.endpoint
        );
        client.delete("k", None).await.unwrap();

        let not_raised = client.alarm(AlarmAction::Deactivate, AlarmType::Nospace, with(member + 1)).await;
        assert!(shape(not_raised.unwrap()).is_empty());
        let cleared = client.alarm(AlarmAction::Deactivate, AlarmType::Nospace, with(member)).await.unwrap();
        assert_eq!(shape(cleared), [(member, AlarmType::Nospace)]);
        client.put("k", "v", None).await.unwrap();
        assert!(shape(client.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap()).is_empty());
    }
}

#[tokio::test]
async fn snapshot_save_and_restore_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::actcd(dir.path(), &[]).await;
    let mut client = server.client().await;
    feed(&mut client).await;
    let before = client.get("", Some(etcd_client::GetOptions::new().with_all_keys())).await.unwrap();
    let revision = before.header().unwrap().revision();
    let hash = client.hash_kv(0).await.unwrap().hash();

    let file = dir.path().join("backup.db");
    let file_arg = file.to_str().unwrap();
    let (ok, out, err) = etcdctl(&server, &["snapshot", "save", file_arg]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("Snapshot saved at {file_arg}\n"));
    let size = std::fs::metadata(&file).unwrap().len();
    assert_eq!(size % 512, 32, "etcd's clients look for a trailing sha256 when size % 512 == 32");
    assert!(!dir.path().join("backup.db.part").exists());

    // The etcd-client crate gets the same framing: chunks, then the 32-byte checksum.
    let mut stream = client.snapshot().await.unwrap();
    let (mut total, mut last) = (0usize, Vec::new());
    while let Some(message) = stream.message().await.unwrap() {
        total += message.blob().len();
        last = message.blob().to_vec();
        if message.remaining_bytes() == 0 && message.blob().len() == 32 {
            break;
        }
    }
    assert_eq!(last.len(), 32);
    assert_eq!(total % 512, 32);

    let restored = tempfile::tempdir().unwrap();
    let target = restored.path().join("data");
    let target_arg = target.to_str().unwrap();
    let (ok, text) = actcd_snapshot(&["restore", file_arg, "--data-dir", target_arg]);
    assert!(ok, "{text}");
    assert!(text.contains(&format!("revision {revision}")), "{text}");
    // A data dir that is not empty is never written into.
    let (ok, text) = actcd_snapshot(&["restore", file_arg, "--data-dir", target_arg]);
    assert!(!ok && text.contains("not empty"), "{text}");

    let copy = Server::actcd(&target, &[]).await;
    let mut copy_client = copy.client().await;
    let after = copy_client.get("", Some(etcd_client::GetOptions::new().with_all_keys())).await.unwrap();
    assert_eq!(after.header().unwrap().revision(), revision);
    let flat = |r: &etcd_client::GetResponse| -> Vec<_> {
        r.kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key().to_vec(),
                    kv.value().to_vec(),
                    kv.create_revision(),
                    kv.mod_revision(),
                    kv.version(),
                )
            })
            .collect()
    };
    assert_eq!(flat(&after), flat(&before));
    assert_eq!(after.count(), 11);
    assert_eq!(copy_client.hash_kv(0).await.unwrap().hash(), hash);
    let compacted = copy_client.get("key/00", Some(etcd_client::GetOptions::new().with_revision(3))).await;
    assert_eq!(
        grpc_error(compacted.unwrap_err()).1,
        "etcdserver: mvcc: required revision has been compacted"
    );
    copy_client.put("new", "write", None).await.unwrap();

    // A damaged or truncated file is refused and leaves no data dir behind.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[600] ^= 0x40;
    let damaged = dir.path().join("damaged.db");
    std::fs::write(&damaged, &bytes).unwrap();
    let nowhere = restored.path().join("nowhere");
    let (ok, text) =
        actcd_snapshot(&["restore", damaged.to_str().unwrap(), "--data-dir", nowhere.to_str().unwrap()]);
    assert!(!ok && text.contains("integrity check failed"), "{text}");
    std::fs::File::create(&damaged).unwrap().write_all(&bytes[..bytes.len() - 100]).unwrap();
    let (ok, _) =
        actcd_snapshot(&["restore", damaged.to_str().unwrap(), "--data-dir", nowhere.to_str().unwrap()]);
    assert!(!ok);
    assert!(!nowhere.exists());
    let names: Vec<_> = std::fs::read_dir(restored.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["data"], "no staging dirs left");
}

#[tokio::test]
async fn a_snapshot_client_that_goes_away_stops_its_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::actcd(dir.path(), &[]).await;
    let mut client = server.client().await;
    // Values that do not compress, so the snapshot is many chunks long.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..64 {
        let value: Vec<u8> = (0..64 * 1024)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        client.put(format!("blob/{i:02}"), value, None).await.unwrap();
    }
    for _ in 0..3 {
        let mut raw = maintenance(&server).await;
        let mut stream = raw.snapshot(SnapshotRequest {}).await.unwrap().into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(first.blob.len(), 32 * 1024);
        assert!(first.remaining_bytes > 2 << 20, "{}", first.remaining_bytes);
        assert!(first.header.is_some());
        drop(stream);
        drop(raw);
    }
    // The server still serves whole snapshots afterwards.
    let file = dir.path().join("whole.db");
    let (ok, _, err) = etcdctl(&server, &["snapshot", "save", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::metadata(&file).unwrap().len() % 512, 32);
}

#[tokio::test]
async fn cluster_and_leader_calls_answer_as_a_single_member_can() {
    let (etcd, actcd) = (Server::temp_etcd(&[]).await, Server::temp_actcd(&["--name", "solo"]).await);
    let not_found = (Code::NotFound, "etcdserver: member not found".to_string());
    // Answers both give alike.
    for server in [&etcd, &actcd] {
        let mut c = cluster(server).await;
        let mut m = maintenance(server).await;
        let plain = c.member_list(MemberListRequest { linearizable: false }).await.unwrap().into_inner();
        let linear = c.member_list(MemberListRequest { linearizable: true }).await.unwrap().into_inner();
        assert_eq!(plain.members, linear.members);
        assert_eq!(plain.members.len(), 1);
        let me = plain.members[0].id;
        let other = me.wrapping_add(1);

        m.move_leader(MoveLeaderRequest { target_id: me }).await.unwrap();
        let bad = m.move_leader(MoveLeaderRequest { target_id: other }).await.unwrap_err();
        assert_eq!(status_of(bad), (Code::FailedPrecondition, "etcdserver: bad leader transferee".into()));
        let removed = c.member_remove(MemberRemoveRequest { id: other }).await.unwrap_err();
        assert_eq!(status_of(removed), not_found, "{}", server.endpoint);
        let update = MemberUpdateRequest { id: other, peer_ur_ls: vec!["http://127.0.0.1:1".into()] };
        assert_eq!(status_of(c.member_update(update).await.unwrap_err()), not_found);
        assert_eq!(
            status_of(c.member_promote(MemberPromoteRequest { id: other }).await.unwrap_err()),
            not_found
        );
        let promote_self = c.member_promote(MemberPromoteRequest { id: me }).await.unwrap_err();
        assert_eq!(
            status_of(promote_self),
            (Code::FailedPrecondition, "etcdserver: can only promote a learner member".into())
        );
    }

    // Downgrade is refused with a clear reason; a member alone takes a learner (opening its
    // peer port as it does) and lets it go again, through etcdctl as an operator would.
    let mut m = maintenance(&actcd).await;
    let err = m.downgrade(DowngradeRequest { action: 0, version: "3.5".into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(err.message().starts_with("actcd: "), "{err:?}");
    let url = format!("http://127.0.0.1:{}", free_port());
    let (ok, out, err) = etcdctl(&actcd, &["member", "add", "second", "--learner", "--peer-urls", &url]);
    assert!(ok && out.contains("ETCD_INITIAL_CLUSTER_STATE=\"existing\""), "{out}{err}");
    let list = cluster(&actcd)
        .await
        .member_list(MemberListRequest { linearizable: true })
        .await
        .unwrap()
        .into_inner();
    let learner = list.members.iter().find(|m| m.is_learner).expect("the learner is listed");
    assert_eq!((list.members.len(), learner.peer_ur_ls.clone()), (2, vec![url]));
    let (ok, out, err) = etcdctl(&actcd, &["member", "remove", &format!("{:x}", learner.id)]);
    assert!(ok && out.contains("removed from cluster"), "{out}{err}");
    let (ok, out, err) = etcdctl(&actcd, &["member", "list"]);
    assert!(ok && out.contains("solo") && out.lines().count() == 1, "{out}{err}");
}

#[tokio::test]
async fn auth_is_disabled_as_on_a_fresh_etcd() {
    let (etcd, actcd) = (Server::temp_etcd(&[]).await, Server::temp_actcd(&[]).await);
    let not_enabled = (Code::FailedPrecondition, "etcdserver: authentication is not enabled".to_string());
    for server in [&etcd, &actcd] {
        let mut a = auth(server).await;
        let login = AuthenticateRequest { name: "foo".into(), password: "bar".into() };
        assert_eq!(status_of(a.authenticate(login).await.unwrap_err()), not_enabled, "{}", server.endpoint);
        a.auth_disable(AuthDisableRequest {}).await.unwrap();
        // etcdctl with credentials goes on without a token when auth is disabled.
        let (ok, out, err) = etcdctl(server, &["--user", "foo:bar", "put", "k", "v"]);
        assert!(ok, "{err}");
        assert_eq!(out, "OK\n");
    }
    let mut a = auth(&actcd).await;
    let status = a.auth_status(AuthStatusRequest {}).await.unwrap().into_inner();
    assert!(!status.enabled);
    assert_eq!(status.auth_revision, 1, "etcd's fresh auth store");
    assert!(status.header.is_some());
    // While auth is disabled, user management needs no credentials, as on etcd.
    for server in [&etcd, &actcd] {
        let users = auth(server).await.user_list(AuthUserListRequest {}).await.unwrap().into_inner().users;
        assert!(users.is_empty(), "{}: {users:?}", server.endpoint);
    }
}
