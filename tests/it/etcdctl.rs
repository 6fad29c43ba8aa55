//! Debian's etcdctl 3.4 against actcd: the commands users type.

use crate::harness::{etcdctl, Server};

#[tokio::test]
async fn everyday_etcdctl_commands_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::actcd(dir.path(), &["--name", "node-a"]).await;

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
