//! Leases: grant, attach, keep-alive, time-to-live, revoke and expiry through the etcd-client
//! crate; the same lease calls against etcd 3.4 and actcd; leases across a restart.

use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType, LeaseGrantOptions, LeaseTimeToLiveOptions, PutOptions, WatchOptions};

use actcd_proto::etcdserverpb::lease_client::LeaseClient;
use actcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest,
    RangeRequest,
};

use crate::harness::{on_etcd_then_actcd, wait_until, Server};

#[tokio::test]
async fn leases_attach_renew_revoke_and_expire_with_one_delete_revision() {
    let server = Server::temp_actcd(&[]).await;
    let mut c = server.client().await;

    let short = c.lease_grant(1, None).await.unwrap();
    assert_eq!(short.ttl(), 2, "TTLs below the minimum are raised to 2 s");
    let long = c.lease_grant(60, Some(LeaseGrantOptions::new().with_id(7777))).await.unwrap();
    assert_eq!((long.id(), long.ttl()), (7777, 60));
    for key in ["e/c", "e/a", "e/b"] {
        c.put(key, "v", Some(PutOptions::new().with_lease(short.id()))).await.unwrap();
    }
    c.put("kept", "v", Some(PutOptions::new().with_lease(7777))).await.unwrap();
    // A later put without the lease detaches the key.
    c.put("kept", "v2", None).await.unwrap();

    let ttl =
        c.lease_time_to_live(short.id(), Some(LeaseTimeToLiveOptions::new().with_keys())).await.unwrap();
    assert_eq!(ttl.granted_ttl(), 2);
    assert_eq!(ttl.keys().to_vec(), vec![b"e/a".to_vec(), b"e/b".to_vec(), b"e/c".to_vec()]);
    assert!(c
        .lease_time_to_live(7777, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap()
        .keys()
        .is_empty());
    let (mut keeper, mut answers) = c.lease_keep_alive(7777).await.unwrap();
    keeper.keep_alive().await.unwrap();
    let renewed = answers.message().await.unwrap().unwrap();
    assert_eq!((renewed.id(), renewed.ttl()), (7777, 60));
    let listed: Vec<i64> = c.leases().await.unwrap().leases().iter().map(|l| l.id()).collect();
    assert!(listed.contains(&7777) && listed.contains(&short.id()));

    let mut watch = c.watch("e/", Some(WatchOptions::new().with_prefix())).await.unwrap();
    assert!(watch.message().await.unwrap().unwrap().created());
    // The short lease expires: its three keys go in one revision, in key order.
    let resp = tokio::time::timeout(Duration::from_secs(8), watch.message()).await.unwrap().unwrap().unwrap();
    let deleted: Vec<(EventType, String, i64)> = resp
        .events()
        .iter()
        .map(|e| {
            (e.event_type(), e.kv().unwrap().key_str().unwrap().to_string(), e.kv().unwrap().mod_revision())
        })
        .collect();
    let rev = deleted[0].2;
    assert_eq!(
        deleted,
        [
            (EventType::Delete, "e/a".into(), rev),
            (EventType::Delete, "e/b".into(), rev),
            (EventType::Delete, "e/c".into(), rev)
        ]
    );
    let gone = c.lease_time_to_live(short.id(), None).await;
    assert_eq!(gone.as_ref().map(|t| t.ttl()).ok(), Some(-1), "{gone:?}");

    // Keep-alive of an unknown lease answers TTL 0, which the client reports as not found.
    let unknown = c.lease_keep_alive(424242).await.map(|_| ());
    assert!(matches!(unknown, Err(etcd_client::Error::LeaseKeepAliveError(_))), "{unknown:?}");

    c.lease_revoke(7777).await.unwrap();
    assert_eq!(c.get("kept", None).await.unwrap().count(), 1, "a detached key outlives its old lease");
}

#[tokio::test]
async fn leases_survive_a_restart_with_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::actcd(dir.path(), &[]).await;
    let mut c = server.client().await;
    c.lease_grant(3, Some(LeaseGrantOptions::new().with_id(11))).await.unwrap();
    c.lease_grant(600, Some(LeaseGrantOptions::new().with_id(12))).await.unwrap();
    c.put("a", "1", Some(PutOptions::new().with_lease(11))).await.unwrap();
    c.put("b", "1", Some(PutOptions::new().with_lease(12))).await.unwrap();
    server.kill();

    let server = Server::actcd(dir.path(), &[]).await;
    let mut c = server.client().await;
    let ttl = c.lease_time_to_live(12, Some(LeaseTimeToLiveOptions::new().with_keys())).await.unwrap();
    assert_eq!((ttl.granted_ttl(), ttl.keys().to_vec()), (600, vec![b"b".to_vec()]));
    // Lease 11 gets its full TTL again after the restart (it is alive now, a restart later than
    // the kill), then expires with its key; lease 12 and its key stay.
    let restarted = std::time::Instant::now();
    assert_eq!(c.get("a", None).await.unwrap().count(), 1, "lease 11 outlived by its key at the restart");
    wait_until(Duration::from_secs(15), "lease 11 to expire with its key", || {
        let mut c = c.clone();
        async move { c.get("a", None).await.is_ok_and(|r| r.count() == 0) }
    })
    .await;
    assert!(
        restarted.elapsed() >= Duration::from_secs(2),
        "lease 11 expired {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(c.get("b", None).await.unwrap().count(), 1);
}

/// The same lease calls, including the failing ones, on etcd 3.4 and actcd.
#[tokio::test]
async fn lease_calls_match_etcd() {
    async fn script(server: &Server) -> Vec<String> {
        let mut lease = LeaseClient::connect(server.endpoint.clone()).await.unwrap();
        let mut kv = server.kv().await;
        let mut out = Vec::new();
        macro_rules! record {
            ($call:expr) => {
                out.push(match $call.await {
                    Ok(r) => {
                        let mut r = r.into_inner();
                        crate::harness::strip_identity(&mut r.header);
                        format!("{r:?}")
                    }
                    Err(s) => format!("{:?} {}", s.code(), s.message()),
                })
            };
        }
        record!(lease.lease_grant(LeaseGrantRequest { ttl: 100, id: 5 }));
        record!(lease.lease_grant(LeaseGrantRequest { ttl: 100, id: 5 }));
        record!(lease.lease_grant(LeaseGrantRequest { ttl: 0, id: 6 }));
        record!(lease.lease_grant(LeaseGrantRequest { ttl: -5, id: 8 }));
        record!(lease.lease_grant(LeaseGrantRequest { ttl: 9_000_000_001, id: 9 }));
        let put = |key: &'static str, lease| PutRequest {
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::from_static(b"v"),
            lease,
            ..Default::default()
        };
        record!(kv.put(put("a", 5)));
        record!(kv.put(put("b", 5)));
        record!(kv.put(put("c", 404)));
        record!(kv.range(RangeRequest { key: "a".into(), ..Default::default() }));
        record!(lease.lease_time_to_live(LeaseTimeToLiveRequest { id: 404, keys: true }));
        record!(lease.lease_revoke(LeaseRevokeRequest { id: 404 }));
        record!(lease.lease_revoke(LeaseRevokeRequest { id: 5 }));
        record!(kv.range(RangeRequest { key: "a".into(), range_end: "z".into(), ..Default::default() }));
        record!(lease.lease_revoke(LeaseRevokeRequest { id: 8 }));
        record!(lease.lease_leases(LeaseLeasesRequest {}));
        out
    }
    let (expected, actual) = on_etcd_then_actcd(&[], &[], script).await;
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a, e, "lease call #{i} differs");
    }
    eprintln!("lease differential: {} calls identical on etcd 3.4 and actcd", expected.len());
}
