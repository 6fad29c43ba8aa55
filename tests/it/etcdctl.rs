//! Debian's etcdctl 3.4 against actcd: the commands users type.

use crate::harness::{etcdctl, Server};

#[tokio::test]
async fn everyday_etcdctl_commands_work() {
    let server = Server::temp_actcd(&["--name", "node-a"]).await;

    assert_eq!(etcdctl(&server, &["put", "foo", "bar"], None).1, "OK\n");
    assert_eq!(etcdctl(&server, &["put", "foo2", "baz"], None).1, "OK\n");
    assert_eq!(etcdctl(&server, &["get", "foo"], None).1, "foo\nbar\n");
    assert_eq!(etcdctl(&server, &["get", "foo", "--prefix", "--keys-only"], None).1, "foo\n\nfoo2\n\n");
    assert_eq!(etcdctl(&server, &["get", "foo", "--rev", "2"], None).1, "foo\nbar\n");
    let json = etcdctl(&server, &["get", "foo", "-w", "json"], None).1;
    assert!(json.contains("\"revision\":3") && json.contains("\"version\":1"), "{json}");

    let txn = "value(\"foo\") = \"bar\"\n\nput foo changed\n\nget foo2\n\n";
    let (ok, out, err) = etcdctl(&server, &["txn"], Some(txn));
    assert!(ok, "{err}");
    assert_eq!(out, "SUCCESS\n\nOK\n");

    assert_eq!(etcdctl(&server, &["del", "foo", "--prefix"], None).1, "2\n");
    let (ok, out, _) = etcdctl(&server, &["compaction", "3"], None);
    assert!(ok);
    assert_eq!(out, "compacted revision 3\n");
    let (ok, _, err) = etcdctl(&server, &["get", "foo", "--rev", "2"], None);
    assert!(!ok && err.contains("required revision has been compacted"), "{err}");

    let (ok, out, err) = etcdctl(&server, &["endpoint", "health"], None);
    assert!(ok, "{err}");
    assert!(err.contains("is healthy") || out.contains("is healthy"), "{out}{err}");
    let (ok, out, err) = etcdctl(&server, &["endpoint", "status", "-w", "table"], None);
    assert!(ok, "{err}");
    assert!(out.contains("3.6.0") && out.contains("true"), "{out}");
    let (ok, out, err) = etcdctl(&server, &["member", "list"], None);
    assert!(ok, "{err}");
    assert!(out.contains("node-a") && out.contains(&server.endpoint), "{out}");

    let (ok, out, err) = etcdctl(&server, &["lease", "grant", "100"], None);
    assert!(ok, "{err}");
    let id = out.split_whitespace().nth(1).unwrap_or_default().to_string();
    assert_eq!(etcdctl(&server, &["put", "leased", "v", "--lease", &id], None).1, "OK\n");
    let ttl = etcdctl(&server, &["lease", "timetolive", &id, "--keys"], None).1;
    assert!(ttl.contains("granted with TTL(100s)") && ttl.contains("attached keys([leased])"), "{ttl}");
    let kept = etcdctl(&server, &["lease", "keep-alive", "--once", &id], None).1;
    assert_eq!(kept, format!("lease {id} keepalived with TTL(100)\n"));
    assert!(etcdctl(&server, &["lease", "list"], None).1.contains(&id));
    assert_eq!(etcdctl(&server, &["lease", "revoke", &id], None).1, format!("lease {id} revoked\n"));
    assert_eq!(etcdctl(&server, &["get", "leased"], None).1, "");
}

/// etcdctl 3.4 given `http://` endpoints (and every `--cluster` command, which dials the
/// members' client URLs) sends the whole URL as the HTTP/2 `:authority`: actcd takes it as
/// etcd's grpc-go does (edge/src/authority_fix.rs, whose unit tests feed it frames).
#[tokio::test]
async fn etcdctl_with_url_endpoints_works() {
    let server = Server::temp_actcd(&[]).await;
    let run = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::etcdctl_binary())
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &server.endpoint, "--command-timeout=20s"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(server.endpoint.starts_with("http://"));
    let (ok, out, err) = run(&["put", "k", "v"]);
    assert!(ok && out == "OK\n", "{out}{err}");
    let (ok, out, err) = run(&["get", "k"]);
    assert!(ok && out == "k\nv\n", "{out}{err}");
    let (ok, out, err) = run(&["endpoint", "status", "--cluster"]);
    assert!(ok && out.contains(", true, "), "{out}{err}");
    let (ok, _, err) = run(&["endpoint", "health", "--cluster"]);
    assert!(ok && err.contains("is healthy"), "{err}");
}
