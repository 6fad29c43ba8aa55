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

/// etcdctl 3.4 given `http://` endpoints (and every `--cluster` command, which dials the
/// members' client URLs) sends the whole URL as the HTTP/2 `:authority`: actcd takes it as
/// etcd's grpc-go does (src/transport/authority_fix.rs).
#[tokio::test]
async fn etcdctl_with_url_endpoints_works() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::actcd(dir.path(), &[]).await;
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

mod authority_fix {
    use actcd::transport::authority_fix::AuthorityFix;
    use bytes::BytesMut;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// Feeds `input` in pieces of `step` bytes.
    fn run(input: &[u8], step: usize) -> Vec<u8> {
        let mut fix = AuthorityFix::default();
        let mut out = BytesMut::new();
        for piece in input.chunks(step) {
            fix.feed(piece, &mut out);
        }
        out.to_vec()
    }

    /// A HEADERS block: `:method: POST` (indexed 3), `:authority` as a literal with
    /// incremental indexing of static name 1 and a raw value, `:path` literal without indexing.
    fn block(authority: &[u8]) -> Vec<u8> {
        let mut b = vec![0x83, 0x41, authority.len() as u8];
        b.extend_from_slice(authority);
        b.extend_from_slice(&[0x04, 0x05]);
        b.extend_from_slice(b"/a/b1");
        b
    }

    #[test]
    fn a_scheme_in_the_authority_is_stripped_and_nothing_else_changes() {
        let data = frame(0x0, 0x1, 1, b"grpc message bytes");
        let settings = frame(0x4, 0x0, 0, &[0, 3, 0, 0, 0, 100]);
        let mut input = PREFACE.to_vec();
        input.extend(&settings);
        input.extend(frame(0x1, 0x4, 1, &block(b"http://127.0.0.1:2379")));
        input.extend(&data);
        let mut expected = PREFACE.to_vec();
        expected.extend(&settings);
        expected.extend(frame(0x1, 0x4, 1, &block(b"127.0.0.1:2379")));
        expected.extend(&data);
        for step in [1, 2, 7, 9, 10, 64, 4096] {
            assert_eq!(run(&input, step), expected, "in pieces of {step}");
        }
        // A padded, prioritised HEADERS frame keeps its pad length, priority and padding.
        let mut padded = vec![3, 0, 0, 0, 0, 16];
        padded.extend(block(b"https://h:1"));
        padded.extend([0, 0, 0]);
        let mut fixed = vec![3, 0, 0, 0, 0, 16];
        fixed.extend(block(b"h:1"));
        fixed.extend([0, 0, 0]);
        let input = [PREFACE, &frame(0x1, 0x2c, 3, &padded)].concat();
        assert_eq!(run(&input, 5), [PREFACE, &frame(0x1, 0x2c, 3, &fixed)].concat());
    }

    #[test]
    fn huffman_values_and_plain_authorities_pass_unchanged_and_so_does_what_is_not_http2() {
        // RFC 7541 C.4.1: `:authority: www.example.com`, Huffman-coded.
        let rfc = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4,
            0xff,
        ];
        let input = [PREFACE, &frame(0x1, 0x5, 1, &rfc)].concat();
        assert_eq!(run(&input, 3), input);
        let plain = [PREFACE, &frame(0x1, 0x4, 1, &block(b"127.0.0.1:2379"))].concat();
        assert_eq!(run(&plain, 1), plain);
        let http1 = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(run(&http1, 4), http1);
        // A truncated block is left for h2 to refuse.
        let broken = [PREFACE, &frame(0x1, 0x4, 1, &[0x41, 0x7f])].concat();
        assert_eq!(run(&broken, 2), broken);
    }
}
