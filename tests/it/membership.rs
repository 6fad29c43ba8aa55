//! Member and cluster ids from etcd's bootstrap flags: an actcd started with the flags of an
//! etcd member reports that member's ids, keeps them across restarts, and refuses a data dir
//! of another member and the clusters it cannot run yet, each in one line.

use std::process::Command;

use actcd_proto::etcdserverpb::cluster_client::ClusterClient;
use actcd_proto::etcdserverpb::{MemberListRequest, MemberListResponse};

use crate::harness::{free_port, Server};

async fn members(server: &Server) -> MemberListResponse {
    let mut c = ClusterClient::connect(server.endpoint.clone()).await.unwrap();
    c.member_list(MemberListRequest { linearizable: true }).await.unwrap().into_inner()
}

fn ids(list: &MemberListResponse) -> (u64, u64) {
    let h = list.header.unwrap();
    (h.cluster_id, h.member_id)
}

/// Runs actcd to its exit (a start that fails): its exit code and stderr.
fn refused(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let port = || format!("http://127.0.0.1:{}", free_port());
    let (client, metrics) = (port(), port());
    let out = Command::new(env!("CARGO_BIN_EXE_actcd"))
        .args(["--data-dir", dir.path().to_str().unwrap(), "--listen-client-urls", &client])
        .args(["--listen-metrics-urls", &metrics])
        .args(args)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn ids_match_an_etcd_member_started_with_the_same_flags() {
    let (d1, d2, d3) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // The launcher gives etcd a peer URL of its own and a one-member --initial-cluster.
    let etcd = Server::etcd_with(d1.path(), &["--initial-cluster-token", "ids-test"]).await;
    let from_etcd = members(&etcd).await;
    let member = from_etcd.members[0].clone();
    let peer = member.peer_ur_ls[0].clone();
    let initial = format!("{}={peer}", member.name);
    let flags = ["--name", member.name.as_str(), "--initial-cluster", initial.as_str()];
    let flags = [
        &flags[..],
        &["--initial-advertise-peer-urls", peer.as_str(), "--initial-cluster-token", "ids-test"],
    ]
    .concat();
    let actcd = Server::actcd(d2.path(), &flags).await;
    let from_actcd = members(&actcd).await;
    assert_eq!(ids(&from_actcd), ids(&from_etcd), "the same flags, the same ids");
    assert_eq!(from_actcd.members[0].id, member.id);
    assert_eq!(from_actcd.members[0].peer_ur_ls, member.peer_ur_ls);
    assert_eq!(from_actcd.members[0].name, member.name);

    // etcd's defaults give etcd's well-known ids (a named member with the default
    // --initial-cluster bootstraps alone on its advertised peer URLs).
    let defaults = Server::actcd(d3.path(), &[]).await;
    assert_eq!(ids(&members(&defaults).await), (0xcdf818194e3a8c32, 0x8e9e05c52164694d));
    drop(defaults);

    // The ids are bound to the data dir: the same flags open it again, other ones are refused.
    let again = Server::actcd(d3.path(), &[]).await;
    assert_eq!(ids(&members(&again).await).1, 0x8e9e05c52164694d);
    drop(again);
    let out = Command::new(env!("CARGO_BIN_EXE_actcd"))
        .args(["--data-dir", d3.path().to_str().unwrap(), "--initial-cluster-token", "another"])
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{}", free_port())])
        .args(["--listen-metrics-urls", &format!("http://127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the data dir belongs to cluster cdf818194e3a8c32 as member 8e9e05c52164694d"),
        "{err}"
    );
}

#[test]
fn bootstrap_flags_it_cannot_follow_are_refused_in_one_line() {
    for (args, says) in [
        (
            vec!["--name", "x", "--initial-cluster", "a=http://127.0.0.1:2380"],
            "couldn't find local name \"x\"",
        ),
        (
            vec!["--initial-cluster", "default=http://127.0.0.1:1"],
            "--initial-cluster has default=http://127.0.0.1:1 but missing",
        ),
        (vec!["--initial-cluster-state", "existing"], "--initial-cluster-state existing"),
        (vec!["--initial-cluster-state", "bogus"], "bogus"),
    ] {
        let (code, err) = refused(&args);
        assert_ne!(code, 0, "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
