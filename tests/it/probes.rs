//! /livez and /readyz as etcd 3.6 answers them, on the client URL (beside gRPC, over HTTP/1.1)
//! and on the metrics URL: bodies, `?verbose`, `?exclude=`, sub-paths, 404 and 405, the check
//! metrics, a CORRUPT alarm that fails /readyz only, and a member without quorum that fails
//! /readyz while /livez stays up. docs/etcd-health.md is the spec these follow.

use std::time::{Duration, Instant};

use actcd::http::probes::{body, Check, Probe, Selection};
use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{AlarmRequest, AlarmType};
use actcd_test_support::server::Kind;
use axum::http::StatusCode;

use crate::cluster::Cluster;
use crate::harness::{http, HttpAnswer, Server};

async fn get(base: &str, path: &str) -> HttpAnswer {
    request(base, "GET", path).await
}

async fn request(base: &str, method: &str, path: &str) -> HttpAnswer {
    http(method, base, path, "").await
}

#[test]
fn exclude_takes_each_value_whole_and_sub_paths_run_one_check() {
    let s = Selection::root(
        Probe::Readyz,
        Some("exclude=linearizable_read&exclude=a%2Cb&exclude=&verbose=false"),
    );
    assert_eq!(s.checks, vec![Check::DataCorruption, Check::SerializableRead, Check::NonLearner]);
    assert!(s.verbose, "verbose is a key present, whatever its value");
    assert_eq!(s.unknown_excludes, vec!["a,b".to_string()], "no comma splitting, empty values skipped");
    // A readyz check is no livez check.
    let s = Selection::root(Probe::Livez, Some("exclude=non_learner"));
    assert_eq!(
        (s.checks, s.unknown_excludes),
        (vec![Check::SerializableRead], vec!["non_learner".to_string()])
    );
    let one = Selection::one(Probe::Readyz.check_named("non_learner").unwrap(), Some("exclude=non_learner"));
    assert_eq!((one.checks, one.verbose), (vec![Check::NonLearner], false));
    assert_eq!(Probe::Livez.check_named("linearizable_read"), None);
}

#[test]
fn bodies_are_etcds() {
    let ok = [(Check::SerializableRead, Ok(())), (Check::NonLearner, Ok(()))];
    assert_eq!(body(&ok, false), (StatusCode::OK, "ok\n".to_string()));
    assert_eq!(
        body(&ok, true),
        (StatusCode::OK, "[+]serializable_read ok\n[+]non_learner ok\nok\n".to_string())
    );
    let failed = [
        (Check::SerializableRead, Ok(())),
        (Check::LinearizableRead, Err("etcdserver: request timed out".into())),
    ];
    let expected = "[+]serializable_read ok\n[-]linearizable_read failed: etcdserver: request timed out\n\n";
    assert_eq!(body(&failed, false), (StatusCode::SERVICE_UNAVAILABLE, expected.to_string()));
    assert_eq!(body(&[], true), (StatusCode::OK, "ok\n".to_string()), "every check excluded");
}

#[tokio::test]
async fn livez_and_readyz_answer_on_client_and_metrics_urls() {
    let server = Server::temp_actcd(&[]).await;
    let mut client = server.client().await;
    for base in [server.endpoint.as_str(), server.metrics.as_str()] {
        let a = get(base, "/livez").await;
        assert_eq!((a.status, a.body.as_str()), (200, "ok\n"), "{base}");
        assert_eq!(a.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
        let a = get(base, "/readyz?verbose").await;
        let all = "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n";
        assert_eq!((a.status, a.body.as_str()), (200, all), "{base}");
        let a = get(base, "/readyz?exclude=linearizable_read&exclude=nothing&verbose=0").await;
        let some = "[+]data_corruption ok\n[+]serializable_read ok\n[+]non_learner ok\nok\n";
        assert_eq!((a.status, a.body.as_str()), (200, some), "{base}");
        let a = get(base, "/readyz/linearizable_read?verbose").await;
        assert_eq!((a.status, a.body.as_str()), (200, "[+]linearizable_read ok\nok\n"), "{base}");
        for missing in ["/readyz/", "/livez/linearizable_read", "/readyz/nope", "/nothing"] {
            let a = get(base, missing).await;
            assert_eq!((a.status, a.body.as_str()), (404, "404 page not found\n"), "{base}{missing}");
        }
        for method in ["POST", "HEAD", "PUT"] {
            let a = request(base, method, "/readyz").await;
            assert_eq!(a.status, 405, "{method} {base}");
            assert_eq!(a.header("allow"), Some("GET"), "{method} {base}");
            if method != "HEAD" {
                assert_eq!(a.body, "Method Not Allowed\n");
            }
        }
        let a = get(base, "/health").await;
        assert_eq!((a.status, a.body.as_str()), (200, r#"{"health":"true","reason":""}"#), "{base}");
    }
    // gRPC on the same port is untouched by the HTTP beside it.
    client.put("k", "v", None).await.unwrap();

    let metrics = get(&server.metrics, "/metrics").await.body;
    assert!(
        metrics.contains(r#"etcd_server_healthcheck{type="readyz",name="linearizable_read"} 1"#),
        "{metrics}"
    );
    let runs = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"etcd_server_healthchecks_total{type="livez",name="serializable_read",status="success"}"#,
            )
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert_eq!(runs.rsplit(' ').next(), Some("2"), "one /livez per URL");

    // A CORRUPT alarm fails /readyz, not /livez; NOSPACE would fail neither.
    let mut maintenance = MaintenanceClient::connect(server.endpoint.clone()).await.unwrap();
    let member = client.status().await.unwrap().header().unwrap().member_id();
    let activate = AlarmRequest {
        action: AlarmAction::Activate as i32,
        member_id: member,
        alarm: AlarmType::Corrupt as i32,
    };
    maintenance.alarm(activate).await.unwrap();
    let a = get(&server.endpoint, "/readyz").await;
    assert_eq!(a.status, 503);
    assert!(
        a.body.starts_with("[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n"),
        "{}",
        a.body
    );
    assert!(a.body.ends_with("ok\n\n"), "{:?}", a.body);
    assert_eq!(get(&server.endpoint, "/readyz?exclude=data_corruption").await.status, 200);
    assert_eq!(get(&server.endpoint, "/livez").await.status, 200);
    let metrics = get(&server.metrics, "/metrics").await.body;
    assert!(
        metrics.contains(r#"etcd_server_healthcheck{type="readyz",name="data_corruption"} 0"#),
        "{metrics}"
    );
}

/// The survivor of a three-member cluster that lost two fails /readyz on its linearizable read
/// while /livez stays 200: a load balancer stops sending it traffic, a liveness probe does not
/// restart it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_without_quorum_while_livez_stays_up() {
    let mut cluster = Cluster::start(Kind::Actcd, 3, &[]).await;
    let leader = cluster.leader().await;
    let survivor = (leader + 1) % 3;
    let base = cluster.member(survivor).endpoint.clone();
    assert_eq!(get(&base, "/readyz").await.status, 200);
    cluster.kill(leader);
    cluster.kill((leader + 2) % 3);
    let lost = Instant::now();
    let failed = loop {
        let a = get(&base, "/readyz").await;
        if a.status == 503 {
            break a;
        }
        assert!(lost.elapsed() < Duration::from_secs(60), "/readyz still {} {:?}", a.status, a.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(failed.body.contains("[-]linearizable_read failed: etcdserver: "), "{}", failed.body);
    assert!(failed.body.contains("[+]serializable_read ok\n"), "{}", failed.body);
    let a = get(&base, "/livez").await;
    assert_eq!((a.status, a.body.as_str()), (200, "ok\n"));
    let a = get(&base, "/health").await;
    assert_eq!((a.status, a.body.as_str()), (503, r#"{"health":"false","reason":"RAFT NO LEADER"}"#));
}
