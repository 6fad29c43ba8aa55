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

    // The same member given the membership as it may be later (another member added): etcd
    // ignores --initial-cluster on a data dir it started before, and so does actcd, whose
    // data dir keeps its ids (a robustness run's rolling restart after a member replace was
    // refused before).
    let grown = format!("default=http://localhost:2380,m2=http://127.0.0.1:{}", free_port());
    let peer = format!("http://127.0.0.1:{}", free_port());
    let again = Server::actcd(d3.path(), &["--initial-cluster", &grown, "--listen-peer-urls", &peer]).await;
    assert_eq!(ids(&members(&again).await), (0xcdf818194e3a8c32, 0x8e9e05c52164694d));
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
        (vec!["--initial-cluster-state", "existing"], "names no other member to join through"),
        (vec!["--initial-cluster-state", "bogus"], "bogus"),
    ] {
        let (code, err) = refused(&args);
        assert_ne!(code, 0, "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The derivation itself (`actcd_raft::cluster::initial_cluster`), without a server.
mod derivation {
    use actcd_raft::cluster::initial_cluster::{
        BootstrapFlags, InitialCluster, DEFAULT_ADVERTISE_PEER_URL, DEFAULT_CLUSTER_TOKEN,
        DEFAULT_INITIAL_CLUSTER, DEFAULT_NAME,
    };

    fn flags<'a>(
        name: &'a str,
        initial_cluster: &'a str,
        advertise: &'a [String],
        token: &'a str,
    ) -> BootstrapFlags<'a> {
        BootstrapFlags { name, initial_cluster, advertise_peer_urls: advertise, token }
    }

    /// The ids etcd 3.4.23 reported on this machine (etcdctl member list -w json) for its
    /// defaults, and for `--name n1 --initial-cluster n1=http://127.0.0.1:23998
    /// --initial-advertise-peer-urls http://127.0.0.1:23998 --initial-cluster-token tok`.
    #[test]
    fn ids_are_the_ones_etcd_reports() {
        let default = [DEFAULT_ADVERTISE_PEER_URL.to_string()];
        let c = InitialCluster::from_flags(flags(
            DEFAULT_NAME,
            DEFAULT_INITIAL_CLUSTER,
            &default,
            DEFAULT_CLUSTER_TOKEN,
        ))
        .expect("etcd's defaults");
        assert_eq!((c.member_id, c.cluster_id), (0x8e9e05c52164694d, 0xcdf818194e3a8c32));
        assert_eq!((c.member_id, c.cluster_id), (10276657743932975437, 14841639068965178418));

        let peer = ["http://127.0.0.1:23998".to_string()];
        let c =
            InitialCluster::from_flags(flags("n1", "n1=http://127.0.0.1:23998", &peer, "tok")).expect("n1");
        assert_eq!((c.member_id, c.cluster_id), (4962766983165694201, 2008747148332546453));
        // A named member with the default --initial-cluster bootstraps alone on its own URLs.
        let alone =
            InitialCluster::from_flags(flags("n1", DEFAULT_INITIAL_CLUSTER, &peer, "tok")).expect("alone");
        assert_eq!(alone, c);
    }

    #[test]
    fn the_cluster_names_this_member_on_its_advertised_urls() {
        let peer = ["http://127.0.0.1:2380".to_string()];
        let err = InitialCluster::from_flags(flags("x", "a=http://127.0.0.1:2380", &peer, "t")).unwrap_err();
        assert_eq!(err.to_string(), "couldn't find local name \"x\" in the initial cluster configuration");
        let err = InitialCluster::from_flags(flags("a", "a=http://127.0.0.1:2381", &peer, "t")).unwrap_err();
        assert!(
            err.to_string().starts_with("--initial-cluster has a=http://127.0.0.1:2381 but missing"),
            "{err}"
        );
        for bad in ["a", "a=127.0.0.1:2380", "a=unix://x:1", "a=http://h:1/path", "a=http://h"] {
            assert!(InitialCluster::from_flags(flags("a", bad, &peer, "t")).is_err(), "{bad}");
        }

        // Three members: the ids do not depend on the order the flag lists them in, and a
        // member's URLs are sorted before hashing.
        let three = "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380";
        let reordered = "c=http://10.0.0.3:2380,a=http://10.0.0.1:2380,b=http://10.0.0.2:2380";
        let a = ["http://10.0.0.1:2380".to_string()];
        let x = InitialCluster::from_flags(flags("a", three, &a, "t")).expect("three");
        let y = InitialCluster::from_flags(flags("a", reordered, &a, "t")).expect("reordered");
        assert_eq!(x, y);
        assert_eq!(x.members.len(), 3);
        assert_eq!(x.own().map(|m| m.name.as_str()), Some("a"));
        let both = ["http://b:2".to_string(), "http://a:1".to_string()];
        let m = InitialCluster::from_flags(flags("m", "m=http://b:2,m=http://a:1", &both, "t"))
            .expect("two urls");
        assert_eq!(
            m.own().map(|m| m.peer_urls.clone()),
            Some(vec!["http://a:1".to_string(), "http://b:2".to_string()])
        );
    }
}
