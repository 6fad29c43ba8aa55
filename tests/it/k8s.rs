//! `actcd-bench k8s` in its short form against a started actcd: every verb of the apiserver's
//! traffic ran without an error; every paginated list added up, at its pinned revision, to the
//! count of its first page; the watch stream saw each write once, as a create, an update or a
//! delete, with prev_kv where there is one, and caught up; consistent reads were answered
//! through progress requests; and the compactor won its compact_rev_key CAS and compacted.

use actcd_bench::cli::{Cli, Command};
use actcd_bench::cmd::k8s::K8sSummary as Summary;
use actcd_bench::output::Out;
use actcd_bench::stop::Stop;
use actcd_proto::etcdserverpb::RangeRequest;
use clap::Parser;
use tonic::Code;

use crate::harness::Server;

/// Runs `actcd-bench k8s` with `args` (after the command name) against `server`.
async fn run(server: &Server, clients: &str, args: &[&str]) -> Summary {
    let pid = server.pid().to_string();
    let mut argv =
        vec!["actcd-bench", "--endpoints", &server.endpoint, "--clients", clients, "--json", "k8s"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--server-pid", &pid]);
    let cli = Cli::try_parse_from(argv).unwrap();
    let settings = cli.global.settings().unwrap();
    let Command::K8s(args) = cli.command else { panic!("parsed as another command") };
    args.validate().unwrap();
    let stop = Stop::new();
    let out = Out::new("k8s", &settings);
    let summary =
        args.load(&settings, &stop, &out).await.unwrap_or_else(|| panic!("stopped: {:?}", stop.reason()));
    assert_eq!(stop.reason(), None);
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k8s_load_runs_every_verb_consistently() {
    let server = Server::temp_actcd(&[]).await;
    #[rustfmt::skip]
    let summary = run(&server, "8", &[
        "--objects", "400", "--nodes", "10", "--duration", "12s", "--rate", "100",
        "--page-size", "50", "--list-rate", "2", "--consistent-read-rate", "1000",
        "--count-interval", "3s", "--status-interval", "3s", "--compact-interval", "4s",
        "--node-lease-interval", "2s",
    ])
    .await;
    assert_eq!((summary.found, summary.seeded, summary.nodes), (0, 400, 10));

    let verbs = [
        "create",
        "update",
        "delete",
        "event",
        "node-lease",
        "list",
        "list-page",
        "consistent-read",
        "count",
        "status",
        "compact",
        "lease-grant",
    ];
    for verb in verbs {
        let v = summary.verb(verb).unwrap_or_else(|| panic!("{verb} never ran: {summary:#?}"));
        assert!(v.requests > 0, "{verb}: {v:?}");
        assert_eq!(v.errors, 0, "{verb}: {v:?}");
    }
    let n = |verb: &str| summary.verb(verb).map_or(0, |v| v.requests);

    // 24 lists of 10 types, pods in pages of 50: each list's pages add up to its count.
    assert!(summary.lists_checked >= 20, "{summary:#?}");
    assert_eq!(summary.lists_inconsistent, 0);
    assert!(n("list-page") > n("list"), "no list went past its first page");

    // Every write of the load is one event, of its kind; the start's writes came before the
    // watch and are not seen.
    let w = &summary.watch;
    assert_eq!(w.error, None);
    assert!(summary.watch_caught_up);
    assert_eq!(w.deleted, n("delete"));
    assert!(w.created >= n("create") + n("event"), "{w:?}");
    assert!(w.updated >= n("node-lease"), "{w:?}");
    let writes = n("create") + n("update") + n("delete") + n("event") + n("node-lease");
    assert_eq!(w.created + w.updated + w.deleted, writes, "{w:?}");
    assert_eq!(w.missing_prev_kv, 0);
    // A consistent read waits (and asks for progress) only when the stream is behind the
    // store: after a write outside /registry (the compactor's compact_rev_key CAS, every 4 s)
    // and before the next watched write, ~10 ms later at 100 writes a second. At 200 reads a
    // second about 6 landed in those gaps, and on a fresh Debian root once none did; at 1000,
    // about 30 do.
    assert!(w.progress_requests > 0 && w.progress > 0, "{w:?}");

    // Two rounds of the compactor: the first sets compact_rev_key, the second compacts to the
    // revision the first saw.
    let c = &summary.compactor;
    assert!(c.compactions >= 1 && c.compacted_to > 0 && c.lost == 0, "{c:?}");
    let mut kv = server.kv().await;
    let key = kv.range(RangeRequest { key: "compact_rev_key".into(), ..Default::default() }).await.unwrap();
    assert_eq!(key.into_inner().kvs[0].version, c.version);
    let old = RangeRequest { key: "/registry/".into(), revision: c.compacted_to - 1, ..Default::default() };
    assert_eq!(kv.range(old).await.unwrap_err().code(), Code::OutOfRange, "not compacted");

    let server_figures = summary.server.as_ref().expect("the server's RSS and CPU");
    assert!(server_figures.rss_peak_mib > 0.0 && server_figures.cpu_secs > 0.0, "{server_figures:?}");
}

/// Writes as fast as 200 clients go fill the watch stream (objects of 1-10 KiB, with prev_kv),
/// so its watchers fall behind and are caught up from storage. They must be caught up as fast
/// as the client reads, and a progress request answered once they are: when catch-up waited
/// for the shard's 100 ms tick, the stream stayed behind for the whole run, 0 of 105 progress
/// requests were answered, and consistent reads timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k8s_watch_keeps_up_with_unthrottled_writes() {
    let server = Server::temp_actcd(&[]).await;
    #[rustfmt::skip]
    let summary = run(&server, "200", &[
        "--objects", "2000", "--nodes", "10", "--duration", "8s", "--rate", "0",
        "--list-rate", "0", "--consistent-read-rate", "50",
    ])
    .await;
    let reads = summary.verb("consistent-read").expect("consistent reads ran");
    assert!(reads.requests > 0 && reads.errors == 0, "{reads:?}");
    let w = &summary.watch;
    assert!(summary.watch_caught_up, "{w:?}");
    assert!(w.progress * 2 >= w.progress_requests, "progress requests left unanswered: {w:?}");
}
