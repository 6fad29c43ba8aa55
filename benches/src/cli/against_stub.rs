//! The commands against an in-process gRPC server that serves only KV puts and ranges (no Watch,
//! no Lease, no Maintenance), and that can be shut down mid-run: the bad-input paths end with a
//! clear reason and counted errors, never a hang.

use super::Cli;
use crate::execute::Run;
use crate::output::Out;
use crate::stop::Stop;
use actcd_test_support::kv_only::serve;
use clap::Parser;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

async fn run_cmd(addr: SocketAddr, args: &[&str]) -> (Stop, Out) {
    let endpoints = format!("--endpoints={addr}");
    let mut argv = vec!["actcd-bench", "--json", "--stall-timeout=1s", &endpoints];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv).expect("parses");
    let (settings, command) = (cli.global.settings().expect("valid"), cli.command);
    let (stop, out) = (Stop::new(), Out::new("test", &settings));
    let run = command.run(&settings, &stop, &out);
    tokio::time::timeout(Duration::from_secs(20), run).await.expect("the command ends");
    (stop, out)
}

#[tokio::test]
async fn put_and_range_complete() {
    let (_tx, rx) = tokio::sync::oneshot::channel();
    let addr = serve(rx).await;
    let (stop, out) = run_cmd(addr, &["--clients=4", "--conns=2", "put", "--total=200"]).await;
    assert!(stop.reason().is_none());
    let doc = out.document();
    assert_eq!(doc.reports[0].requests, 200);
    assert_eq!(doc.reports[0].errors, 0);
    let (stop, out) = run_cmd(addr, &["range", "foo", "--total=50", "--rate=1000"]).await;
    assert!(stop.reason().is_none());
    assert_eq!(out.document().reports[0].requests, 50);
}

#[tokio::test]
async fn missing_services_stop_with_a_clear_reason() {
    let (_tx, rx) = tokio::sync::oneshot::channel();
    let addr = serve(rx).await;

    let (stop, out) = run_cmd(addr, &["lease-keepalive", "--total=1000"]).await;
    let reason = stop.reason().unwrap_or_default();
    assert!(reason.contains("Unimplemented"), "{reason}");
    let report = &out.document().reports[0];
    assert_eq!(report.requests, 0);
    assert!(report.errors >= 1 && report.errors < 1000);

    let (stop, out) =
        run_cmd(addr, &["watch", "--streams=3", "--watch-per-stream=5", "--put-total=10"]).await;
    let reason = stop.reason().unwrap_or_default();
    assert!(reason.contains("Watch") && reason.contains("Unimplemented"), "{reason}");
    let doc = out.document();
    assert_eq!(doc.reports.len(), 1, "only the creation report");
    assert_eq!(doc.reports[0].errors, 15);

    let (stop, _) = run_cmd(addr, &["watch-latency", "--put-total=10"]).await;
    assert!(stop.reason().unwrap_or_default().contains("Unimplemented"));

    let (stop, _) = run_cmd(addr, &["watch-fanout", "--watchers=20", "--streams=4", "--puts=10"]).await;
    assert!(stop.reason().unwrap_or_default().contains("Unimplemented"));

    let (stop, out) = run_cmd(addr, &["watch-get", "--watchers=10", "--streams=2", "--events=2"]).await;
    let reason = stop.reason().unwrap_or_default();
    assert!(reason.contains("Watch") && reason.contains("Unimplemented"), "{reason}");
    assert_eq!(out.document().reports.len(), 1, "the get report, of what completed");

    // STM reads and commits with Txn, which the stub does not serve.
    let (stop, out) = run_cmd(addr, &["stm", "--total=100", "--keys=4", "--keys-per-txn=2"]).await;
    assert!(stop.reason().unwrap_or_default().contains("Unimplemented"));
    assert!(out.document().reports[0].errors >= 1);
    let (stop, _) = run_cmd(addr, &["stm", "--total=10", "--stm-locker=lock-client"]).await;
    assert!(stop.reason().unwrap_or_default().contains("lock session"), "{:?}", stop.reason());

    let (stop, out) = run_cmd(addr, &["put", "--total=10", "--check-hashkv"]).await;
    assert!(stop.reason().is_none());
    let doc = out.document();
    assert_eq!(doc.reports[0].requests, 10);
    assert!(doc.notes.iter().any(|n| n.contains("hashkv")), "{:?}", doc.notes);
}

#[tokio::test]
async fn a_server_dying_mid_run_ends_the_run() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = serve(rx).await;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = tx.send(());
    });
    let started = Instant::now();
    // 100 puts a second for 100 s: far longer than the server lives.
    let (stop, out) = run_cmd(addr, &["--clients=2", "put", "--total=10000", "--rate=100"]).await;
    let report = &out.document().reports[0];
    assert!(report.requests > 0 && report.requests < 10000);
    assert!(report.errors > 0, "errors counted");
    assert!(stop.reason().unwrap_or_default().contains("stall"));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn unreachable_endpoints_report_the_dial_error() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let addr = serve(rx).await;
    let _ = tx.send(());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (stop, out) = run_cmd(addr, &["--conns=3", "range", "foo"]).await;
    assert!(stop.reason().unwrap_or_default().contains("cannot connect"));
    let doc = out.document();
    assert_eq!(doc.reports[0].errors, 3);
    assert_eq!(doc.reports[0].requests, 0);
}

#[tokio::test]
async fn failover_moves_to_the_next_endpoint_and_reports_the_open_end() {
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let (second_tx, second_rx) = tokio::sync::oneshot::channel();
    let (first, second) = (serve(first_rx).await, serve(second_rx).await);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = first_tx.send(());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = second_tx.send(());
    });
    // run_cmd names the first endpoint; a second --endpoints adds to it.
    let endpoints = format!("--endpoints={second}");
    let args = [endpoints.as_str(), "--conns=2", "--request-timeout=200ms", "failover", "--duration=1500ms"];
    let (stop, out) = run_cmd(first, &args).await;
    assert!(stop.reason().is_none(), "{:?}", stop.reason());
    let doc = out.document();
    let gaps = &doc.extra["failover"];
    assert!(gaps["acknowledged"].as_u64().unwrap() > 10, "{gaps}");
    assert!(gaps["failed"].as_u64().unwrap() >= 2, "{gaps}");
    // The first server's end is bridged by the second connection; the second's is the open end.
    assert_eq!(gaps["recovered"], false, "{gaps}");
    let from = gaps["gap_from_ms"].as_f64().unwrap();
    assert!((700.0..1000.0).contains(&from), "{gaps}");
    assert!(gaps["longest_gap_ms"].as_f64().unwrap() >= 500.0, "{gaps}");
    assert_eq!(doc.reports[0].requests, gaps["acknowledged"].as_u64().unwrap());
}
