//! KV semantics through the independent `etcd-client` crate against a started actcd.

use etcd_client::{
    Compare, CompareOp, DeleteOptions, Error, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tonic::Code;

use crate::harness::Server;

fn status(err: Error) -> (Code, String) {
    match err {
        Error::GRpcStatus(s) => (s.code(), s.message().to_string()),
        other => panic!("expected a gRPC status, got {other:?}"),
    }
}

fn rev(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.expect("header").revision()
}

#[tokio::test]
async fn revisions_versions_and_tombstones_follow_etcd() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;

    // An empty store is at revision 1.
    let empty = c.get("a", None).await.unwrap();
    assert_eq!(rev(empty.header()), 1);
    assert_eq!(empty.count(), 0);

    assert_eq!(rev(c.put("a", "1", None).await.unwrap().header()), 2);
    let second = c.put("a", "2", Some(PutOptions::new().with_prev_key())).await.unwrap();
    assert_eq!(rev(second.header()), 3);
    assert_eq!(second.prev_key().unwrap().value(), b"1");

    let got = c.get("a", None).await.unwrap();
    let kv = &got.kvs()[0];
    assert_eq!((kv.create_revision(), kv.mod_revision(), kv.version()), (2, 3, 2));

    // A delete that matches nothing does not bump the revision.
    let none = c.delete("zzz", None).await.unwrap();
    assert_eq!((none.deleted(), rev(none.header())), (0, 3));

    let del = c.delete("a", Some(DeleteOptions::new().with_prev_key())).await.unwrap();
    assert_eq!((del.deleted(), rev(del.header())), (1, 4));
    assert_eq!(del.prev_kvs()[0].value(), b"2");

    // Re-put restarts the version at 1 with a new create revision.
    c.put("a", "3", None).await.unwrap();
    let kv = c.get("a", None).await.unwrap().kvs()[0].clone();
    assert_eq!((kv.create_revision(), kv.mod_revision(), kv.version()), (5, 5, 1));

    // History stays readable until compacted.
    let old = c.get("a", Some(GetOptions::new().with_revision(3))).await.unwrap();
    assert_eq!(old.kvs()[0].value(), b"2");
    assert_eq!(c.get("a", Some(GetOptions::new().with_revision(4))).await.unwrap().count(), 0);
    assert_eq!(rev(c.get("a", Some(GetOptions::new().with_revision(4))).await.unwrap().header()), 5);
}

#[tokio::test]
async fn ranges_prefix_limit_sort_and_filters() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;
    for (k, v) in [("p/a", "3"), ("p/b", "1"), ("p/c", "2"), ("q", "0")] {
        c.put(k, v, None).await.unwrap();
    }
    c.put("p/b", "1b", None).await.unwrap();

    let prefix = c.get("p/", Some(GetOptions::new().with_prefix())).await.unwrap();
    assert_eq!(prefix.kvs().iter().map(|kv| kv.key()).collect::<Vec<_>>(), [b"p/a", b"p/b", b"p/c"]);

    let limited = c.get("p/", Some(GetOptions::new().with_prefix().with_limit(2))).await.unwrap();
    assert_eq!((limited.kvs().len(), limited.more(), limited.count()), (2, true, 3));

    let from_key = c.get("p/b", Some(GetOptions::new().with_from_key())).await.unwrap();
    assert_eq!(from_key.count(), 3);
    let all = c.get("", Some(GetOptions::new().with_all_keys())).await.unwrap();
    assert_eq!(all.count(), 4);

    let by_value = c
        .get("p/", Some(GetOptions::new().with_prefix().with_sort(SortTarget::Value, SortOrder::Descend)))
        .await
        .unwrap();
    assert_eq!(by_value.kvs().iter().map(|kv| kv.value()).collect::<Vec<_>>(), [&b"3"[..], b"2", b"1b"]);

    let by_version = c
        .get(
            "p/",
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Version, SortOrder::Descend)
                    .with_limit(1),
            ),
        )
        .await
        .unwrap();
    assert_eq!((by_version.kvs()[0].key(), by_version.more()), (&b"p/b"[..], true));

    let keys_only = c.get("p/", Some(GetOptions::new().with_prefix().with_keys_only())).await.unwrap();
    assert!(keys_only.kvs().iter().all(|kv| kv.value().is_empty()));
    let count_only = c.get("p/", Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap();
    assert_eq!((count_only.kvs().len(), count_only.count()), (0, 3));

    let modified_late =
        c.get("p/", Some(GetOptions::new().with_prefix().with_min_mod_revision(6))).await.unwrap();
    assert_eq!(modified_late.kvs().iter().map(|kv| kv.key()).collect::<Vec<_>>(), [b"p/b"]);
    assert_eq!(modified_late.count(), 3, "count ignores the filters");
    let created_early =
        c.get("p/", Some(GetOptions::new().with_prefix().with_max_create_revision(3))).await.unwrap();
    assert_eq!(created_early.kvs().len(), 2);
}

#[tokio::test]
async fn txns_compare_branch_and_nest() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;
    c.put("k", "v1", None).await.unwrap();

    // Create-if-absent, the Kubernetes shape: MOD == 0.
    let create = Txn::new()
        .when([Compare::mod_revision("new", CompareOp::Equal, 0)])
        .and_then([TxnOp::put("new", "x", None), TxnOp::get("new", None)]);
    let resp = c.txn(create).await.unwrap();
    assert!(resp.succeeded());
    assert_eq!(rev(resp.header()), 3);
    match &resp.op_responses()[1] {
        TxnOpResponse::Get(get) => {
            assert_eq!(get.kvs()[0].value(), b"x", "reads see the txn's own writes")
        }
        other => panic!("unexpected {other:?}"),
    }

    let failing = Txn::new()
        .when([Compare::value("k", CompareOp::Equal, "nope")])
        .and_then([TxnOp::put("k", "bad", None)])
        .or_else([TxnOp::get("k", None)]);
    let resp = c.txn(failing).await.unwrap();
    assert!(!resp.succeeded());
    assert_eq!(rev(resp.header()), 3, "a read-only branch does not bump");

    let nested = Txn::new().when([Compare::version("k", CompareOp::Greater, 0)]).and_then([
        TxnOp::put("a", "1", None),
        TxnOp::txn(
            Txn::new()
                .when([Compare::value("k", CompareOp::Equal, "v1")])
                .and_then([TxnOp::put("b", "2", None)]),
        ),
        TxnOp::delete("k", None),
    ]);
    let resp = c.txn(nested).await.unwrap();
    assert!(resp.succeeded());
    assert_eq!(rev(resp.header()), 4, "one revision for the whole txn");
    let a = c.get("a", None).await.unwrap().kvs()[0].clone();
    let b = c.get("b", None).await.unwrap().kvs()[0].clone();
    assert_eq!((a.mod_revision(), b.mod_revision()), (4, 4));
    assert_eq!(c.get("k", None).await.unwrap().count(), 0);
}

#[tokio::test]
async fn bad_requests_get_etcd_errors() {
    let server = Server::temp_actcd(&["--max-request-bytes", "4096", "--max-txn-ops", "4"]).await;
    let mut c = server.client().await;
    c.put("k", "v", None).await.unwrap();

    let invalid = |e: Error, text: &str| assert_eq!(status(e), (Code::InvalidArgument, text.to_string()));
    invalid(c.put("", "v", None).await.unwrap_err(), "etcdserver: key is not provided");
    invalid(c.get("", None).await.unwrap_err(), "etcdserver: key is not provided");
    invalid(
        c.put("missing", "", Some(PutOptions::new().with_ignore_value())).await.unwrap_err(),
        "etcdserver: key not found",
    );
    invalid(
        c.put("k", "v", Some(PutOptions::new().with_ignore_value())).await.unwrap_err(),
        "etcdserver: value is provided",
    );
    invalid(c.put("k", "x".repeat(8192), None).await.unwrap_err(), "etcdserver: request is too large");
    // Past --max-request-bytes + 512 KiB the frame is refused from its length prefix.
    let (code, _) = status(c.put("k", "x".repeat(600 * 1024), None).await.unwrap_err());
    assert_eq!(code, Code::ResourceExhausted);
    let five =
        Txn::new().and_then((0..5).map(|i| TxnOp::put(format!("t{i}"), "v", None)).collect::<Vec<_>>());
    invalid(c.txn(five).await.unwrap_err(), "etcdserver: too many operations in txn request");
    let dup = Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]);
    invalid(c.txn(dup).await.unwrap_err(), "etcdserver: duplicate key given in txn request");

    assert_eq!(
        status(c.put("k", "v", Some(PutOptions::new().with_lease(42))).await.unwrap_err()),
        (Code::NotFound, "etcdserver: requested lease not found".into())
    );
    assert_eq!(
        status(c.get("k", Some(GetOptions::new().with_revision(1000))).await.unwrap_err()),
        (Code::OutOfRange, "etcdserver: mvcc: required revision is a future revision".into())
    );
    c.put("k", "v2", None).await.unwrap();
    c.compact(3, None).await.unwrap();
    assert_eq!(
        status(c.get("k", Some(GetOptions::new().with_revision(2))).await.unwrap_err()),
        (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted".into())
    );
    assert_eq!(
        status(c.compact(3, None).await.unwrap_err()),
        (Code::OutOfRange, "etcdserver: mvcc: required revision has been compacted".into())
    );
    // Nothing written before the errors was lost.
    assert_eq!(c.get("k", None).await.unwrap().kvs()[0].value(), b"v2");
}

#[tokio::test]
async fn quota_refuses_puts_but_not_reads_or_deletes() {
    let server = Server::temp_actcd(&["--quota-backend-bytes", "65536"]).await;
    let mut c = server.client().await;
    let mut refused = None;
    for i in 0..200 {
        if let Err(e) = c.put(format!("key{i}"), vec![b'x'; 1024], None).await {
            refused = Some(status(e));
            break;
        }
    }
    assert_eq!(refused, Some((Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded".into())));
    assert!(c.get("key0", None).await.unwrap().count() == 1);
    assert_eq!(c.delete("key0", None).await.unwrap().deleted(), 1);
}

#[tokio::test]
async fn restart_keeps_data_revision_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::actcd(dir.path(), &[]).await;
    let mut c = server.client().await;
    for i in 0..50 {
        c.put(format!("k{}", i % 10), format!("v{i}"), None).await.unwrap();
    }
    c.delete("k3", None).await.unwrap();
    c.compact(30, None).await.unwrap();
    server.kill();

    let server = Server::actcd(dir.path(), &[]).await;
    let mut c = server.client().await;
    let all = c.get("k", Some(GetOptions::new().with_prefix())).await.unwrap();
    assert_eq!((all.count(), rev(all.header())), (9, 52));
    assert_eq!(c.get("k9", None).await.unwrap().kvs()[0].value(), b"v49");
    assert_eq!(
        c.get("k9", Some(GetOptions::new().with_revision(30))).await.unwrap().kvs()[0].value(),
        b"v19"
    );
    assert_eq!(
        status(c.get("k9", Some(GetOptions::new().with_revision(29))).await.unwrap_err()).0,
        Code::OutOfRange
    );
    assert_eq!(rev(c.put("k0", "after", None).await.unwrap().header()), 53);
}
