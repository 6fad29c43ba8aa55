//! `k8s`: the traffic a Kubernetes apiserver sends its etcd, shaped as the apiserver's storage
//! layer (k8s.io/apiserver pkg/storage/etcd3) sends it.
//!
//! Objects live under /registry/<type>/<namespace>/<name> with sizes of 1–10 KiB by type. The
//! run first does what an apiserver's start does: lists every type (to learn its objects and
//! their revisions) and creates objects up to `--objects` and one Lease per node; then, for
//! `--duration`, all at once:
//! - writes at `--rate`: creates (Txn mod_revision = 0, Put), updates (GuaranteedUpdate:
//!   Txn mod_revision = seen, Put, else Get), deletes (the same with Delete) and events (created
//!   on a shared lease from LeaseGrant, reused for a while, never kept alive), 1:6:1:2;
//! - every node's Lease renewed by a GuaranteedUpdate every `--node-lease-interval`;
//! - informer lists at `--list-rate`: pages of `--page-size` at the first page's revision,
//!   each list checked against its first page's count;
//! - consistent reads from cache at `--consistent-read-rate`: the current revision, then
//!   RequestProgress on the watch stream until it has seen it;
//! - one watch per type on one stream, with prev_kv and progress notifications;
//! - a count_only Range per type every `--count-interval`, Status every `--status-interval`,
//!   and compaction through compact_rev_key every `--compact-interval`.
//!
//! Each verb gets etcd benchmark's report; a table of QPS and p99 per verb, the checks (lists
//! consistent, watch events by kind, compactions) and, with `--server-pid`, the server's RSS and
//! CPU next to the client's close it.

pub mod leases;
pub mod periodic;
pub mod reads;
pub mod resources;
pub mod server;
pub mod store;
pub mod watch;
pub mod writes;

use self::leases::LeaseManager;
use self::periodic::{count_all, every, status, Compactor};
use self::reads::{FreshReader, ListChecks, Lister};
use self::resources::{prefix, watched, Bodies, Object, Objects, Resource, NODE_LEASES, RESOURCES};
use self::server::{Sampler, ServerUsage};
use self::watch::{WatchCache, WatchCounts};
use self::writes::{Namer, Nodes, Renewer, Seeder, Shared, Writer, VERBS};
use crate::conn::{bounded, channel_for, connect, kv_client, Conn};
use crate::keys::Rng;
use crate::output::Out;
use crate::report::{Recorder, Stats};
use crate::runner::{run_load, Plan};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::go_duration::parse as parse_go_duration;
use clap::Args;
use futures::StreamExt;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clients that list: an informer relists one type at a time; a few lists may overlap.
const LIST_CLIENTS: usize = 4;
/// Clients renewing node leases: each renewal is one small Txn.
const RENEW_CLIENTS: usize = 8;
const CREATE_NODES_AT_ONCE: usize = 64;
/// Clients doing consistent reads (each waits for the watch stream's progress).
const READ_CLIENTS: usize = 16;

/// The reports after the write verbs ([`VERBS`]), in their order.
const OTHER_VERBS: [&str; 8] =
    ["node-lease", "list", "list-page", "consistent-read", "count", "status", "compact", "lease-grant"];

#[derive(Debug, Clone, Args)]
pub struct K8sArgs {
    /// Objects in the store (pods, replicasets, configmaps, secrets, endpointslices, services,
    /// deployments, serviceaccounts by share); created before the load when fewer exist.
    #[arg(long, default_value_t = 10_000)]
    pub objects: u64,
    /// Nodes, each renewing its Lease (0: one per 100 objects).
    #[arg(long, default_value_t = 0)]
    pub nodes: usize,
    /// How long the load runs (after the start's lists and creates).
    #[arg(long, default_value = "1m", value_parser = parse_go_duration)]
    pub duration: Duration,
    /// Write verbs (create, update, delete, event) per second.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// How often each node renews its Lease.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub node_lease_interval: Duration,
    /// Full paginated lists per second (each of one type, the types in turn; 0: none).
    #[arg(long, default_value_t = 0.5)]
    pub list_rate: f64,
    /// Objects per list page (the apiserver's informers ask for 500).
    #[arg(long, default_value_t = 500)]
    pub page_size: i64,
    /// Consistent reads from cache per second (0: none).
    #[arg(long, default_value_t = 20.0)]
    pub consistent_read_rate: f64,
    /// How often every type is counted (0: never).
    #[arg(long, default_value = "1m", value_parser = parse_go_duration)]
    pub count_interval: Duration,
    /// How often Status is polled (0: never).
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub status_interval: Duration,
    /// How often the compactor runs (0: never); the first round only sets compact_rev_key, each
    /// later one compacts to the revision of the round before.
    #[arg(long, default_value = "5m", value_parser = parse_go_duration)]
    pub compact_interval: Duration,
    /// The server's pid, to report its RSS and CPU (when it runs on this machine).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// One verb's figures in the closing table, latencies in ms.
#[derive(Debug, Clone, Serialize)]
pub struct VerbFigures {
    pub verb: String,
    pub requests: u64,
    pub errors: u64,
    /// Successes per second of the load.
    pub qps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub first_error: Option<String>,
}

impl VerbFigures {
    fn of(stats: &Stats) -> Self {
        // etcd's percentiles leave out those past the end (99 % of fewer than 100 requests):
        // the slowest stands in for them.
        let at = |p: f64| stats.percentile(p).filter(|&s| s > 0.0).unwrap_or(stats.slowest_secs);
        Self {
            verb: stats.name.clone(),
            requests: stats.requests,
            errors: stats.errors,
            qps: stats.requests_per_sec,
            p50_ms: at(50.0) * 1e3,
            p99_ms: at(99.0) * 1e3,
            first_error: stats.error_distribution.first().map(|e| e.error.clone()),
        }
    }
}

/// What a run did, checked: the objects found at the start and created to reach `--objects`
/// (and the seconds that took), the nodes, the load's seconds, per verb, the lists checked and
/// those whose pages did not add up to their count at the pinned revision, what the watch
/// stream delivered and whether it reached the store's last revision after the load, what the
/// compactor did, the conflicts updates and deletes retried, the server's RSS and CPU.
#[derive(Debug, Clone, Serialize)]
pub struct K8sSummary {
    pub found: u64,
    pub seeded: u64,
    pub seed_secs: f64,
    pub nodes: usize,
    pub load_secs: f64,
    pub verbs: Vec<VerbFigures>,
    pub lists_checked: u64,
    pub lists_inconsistent: u64,
    pub watch: WatchCounts,
    pub watch_caught_up: bool,
    pub compactor: Compactor,
    pub conflicts: u64,
    pub server: Option<ServerUsage>,
}

impl K8sSummary {
    pub fn verb(&self, verb: &str) -> Option<&VerbFigures> {
        self.verbs.iter().find(|v| v.verb == verb)
    }

    pub fn to_text(&self) -> String {
        let mut s = format!(
            "\nk8s: {} objects found, {} created in {:.1} s, {} nodes; load {:.1} s\n",
            self.found, self.seeded, self.seed_secs, self.nodes, self.load_secs
        );
        s += "  verb\trequests\terrors\tQPS\tp50 ms\tp99 ms\n";
        for v in &self.verbs {
            s += &format!(
                "  {}\t{}\t{}\t{:.1}\t{:.2}\t{:.2}\n",
                v.verb, v.requests, v.errors, v.qps, v.p50_ms, v.p99_ms
            );
        }
        let w = &self.watch;
        s += &format!(
            "  lists checked {} ({} inconsistent); watch events: {} created, {} updated, {} deleted ({} without prev_kv), {} progress notifications for {} requests, caught up: {}\n",
            self.lists_checked, self.lists_inconsistent, w.created, w.updated, w.deleted, w.missing_prev_kv,
            w.progress, w.progress_requests, self.watch_caught_up
        );
        if let Some(e) = &w.error {
            s += &format!("  watch stream: {e}\n");
        }
        let c = &self.compactor;
        s += &format!(
            "  compactions {} (to revision {}), CAS lost {}; write conflicts retried {}\n",
            c.compactions, c.compacted_to, c.lost, self.conflicts
        );
        if let Some(u) = &self.server {
            s += &format!(
                "\nServer (pid {}):\n  RSS:\t{:.0} MiB at start, {:.0} MiB peak, {:.0} MiB at end.\n  CPU:\t{:.2} secs, {:.2} cores.\n",
                u.pid, u.rss_start_mib, u.rss_peak_mib, u.rss_end_mib, u.cpu_secs, u.cores_used
            );
        }
        s
    }
}

impl K8sArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.objects == 0 {
            return Err("--objects must be at least 1".to_string());
        }
        for (flag, d) in [("--duration", self.duration), ("--node-lease-interval", self.node_lease_interval)]
        {
            if d.is_zero() {
                return Err(format!("{flag} must be above 0"));
            }
        }
        let rates = [
            ("--rate", self.rate),
            ("--list-rate", self.list_rate),
            ("--consistent-read-rate", self.consistent_read_rate),
        ];
        if let Some((flag, r)) = rates.into_iter().find(|(_, r)| !(r.is_finite() && *r >= 0.0)) {
            return Err(format!("{flag} must be 0 or more, got {r}"));
        }
        if self.page_size < 1 {
            return Err("--page-size must be at least 1".to_string());
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        self.load(settings, stop, out).await;
    }

    /// Runs the load and reports it; the summary, `None` when it stopped before the load.
    pub async fn load(self, settings: &Settings, stop: &Stop, out: &Out) -> Option<K8sSummary> {
        let a = self;
        let channels = connect(settings, stop, out, &["k8s"]).await?;
        let bound = settings.request_timeout;
        let page = (a.page_size, bound);
        let mut kv = kv_client(channels[0].clone());
        let started = Instant::now();
        let recs: Vec<Arc<Recorder>> =
            VERBS.iter().chain(&OTHER_VERBS).map(|v| Arc::new(Recorder::new(*v, settings.sample))).collect();
        let rec = |verb: &str| recs.iter().find(|r| r.name() == verb).expect("a verb of the load");

        // The start: what is there, then creates up to the target.
        let objects = Objects::default();
        for (t, resource) in RESOURCES.iter().enumerate() {
            for o in stop.check(list_all(&mut kv, resource, page).await)? {
                objects.put(t, o);
            }
        }
        let found = objects.total() as u64;
        let shared = Arc::new(Shared {
            objects,
            bodies: Bodies::default(),
            namer: Namer::default(),
            leases: LeaseManager::new(channels[0].clone(), rec("lease-grant").clone()),
            conflicts: AtomicU64::new(0),
        });
        let writer = |c: usize| Writer {
            kv: kv_client(channel_for(&channels, c)),
            rng: Rng::new(),
            shared: shared.clone(),
        };
        let seeded = a.objects.saturating_sub(found);
        if seeded > 0 {
            out.print(&format!("k8s: {found} objects found, creating {seeded}\n"));
            let rec = Arc::new(Recorder::new("seed", false));
            let seeders = (0..settings.clients).map(|c| Seeder(writer(c))).collect();
            run_load(settings, stop, Plan::new(seeded, 0), std::slice::from_ref(&rec), seeders).await;
            let s = rec.stats(Duration::ZERO);
            if let Some(e) = s.error_distribution.first() {
                stop.stop(format!("creating the objects failed {} times: {}", s.errors, e.error));
            }
        }
        let nodes = if a.nodes > 0 { a.nodes } else { (a.objects / 100).max(1) as usize };
        let nodes = Arc::new(stop.check(node_leases(&channels, &shared, nodes, page).await)?);
        if stop.is_stopped() {
            return None;
        }
        let seed_secs = started.elapsed().as_secs_f64();

        // The watch cache starts where the lists ended.
        let revision = stop
            .check(bounded(bound, store::count(&mut kv, &prefix(&RESOURCES[0]))).await.map_err(String::from))?
            .1;
        let prefixes: Vec<_> = watched().map(|r| prefix(&r)).collect();
        let cache =
            stop.check(WatchCache::open(channels[0].clone(), &prefixes, revision + 1, bound).await)?;
        let sampler = a.server_pid.and_then(|pid| {
            Sampler::start(pid)
                .map_err(|e| out.note(format!("--server-pid {pid}: {e}; the server's figures are left out")))
                .ok()
        });

        let checks = Arc::new(ListChecks::default());
        let load_started = Instant::now();
        let end = load_started + a.duration;
        let writers: Vec<Writer> = (0..settings.clients).map(writer).collect();
        let renewers: Vec<Renewer> = (0..RENEW_CLIENTS)
            .map(|c| Renewer {
                kv: kv_client(channel_for(&channels, c)),
                rng: Rng::new(),
                nodes: nodes.clone(),
                shared: shared.clone(),
            })
            .collect();
        let listers: Vec<Lister> = (0..LIST_CLIENTS)
            .map(|c| Lister {
                kv: kv_client(channel_for(&channels, c)),
                page,
                pages: rec("list-page").clone(),
                checks: checks.clone(),
            })
            .collect();
        let readers: Vec<FreshReader> = (0..READ_CLIENTS)
            .map(|c| FreshReader { kv: kv_client(channel_for(&channels, c)), cache: cache.cache.clone() })
            .collect();
        let renew_rate = nodes.count() as f64 / a.node_lease_interval.as_secs_f64();
        let plan = |rate: f64| Plan::for_duration(rate, a.duration).quiet();
        let one = |verb| std::slice::from_ref(rec(verb));
        let mut compactor = Compactor::default();
        let mut m = MaintenanceClient::new(channels[0].clone());
        let (mut count_kv, mut compact_kv) = (kv.clone(), kv.clone());
        let load = async {
            tokio::join!(
                run_load(
                    settings,
                    stop,
                    Plan::for_duration(a.rate, a.duration),
                    &recs[..VERBS.len()],
                    writers
                ),
                run_load(settings, stop, plan(renew_rate), one("node-lease"), renewers),
                async {
                    if a.list_rate > 0.0 {
                        run_load(settings, stop, plan(a.list_rate), one("list"), listers).await;
                    }
                },
                async {
                    if a.consistent_read_rate > 0.0 {
                        run_load(
                            settings,
                            stop,
                            plan(a.consistent_read_rate),
                            one("consistent-read"),
                            readers,
                        )
                        .await;
                    }
                },
                every(Duration::ZERO, a.count_interval, end, async || count_all(
                    &mut count_kv,
                    rec("count"),
                    bound
                )
                .await),
                every(Duration::ZERO, a.status_interval, end, async || status(&mut m, rec("status"), bound)
                    .await),
                every(a.compact_interval, a.compact_interval, end, async || {
                    compactor.round(&mut compact_kv, rec("compact"), bound).await
                }),
            )
        };
        tokio::select! {
            _ = load => {}
            _ = stop.stopped() => {}
        }
        let load_secs = load_started.elapsed();

        // The watch has seen every write once it reaches the store's revision now.
        let last = bounded(bound, store::count(&mut kv, &prefix(&RESOURCES[0]))).await.map(|(_, r)| r);
        let watch_caught_up = match last {
            Ok(r) => matches!(tokio::time::timeout(bound, cache.cache.wait_fresh(r)).await, Ok(Ok(()))),
            Err(_) => false,
        };
        let watch = cache.cache.counts();
        cache.close();
        let server = sampler.and_then(Sampler::finish);

        let mut verbs = Vec::new();
        for rec in &recs {
            let stats = rec.stats(load_secs);
            if stats.requests + stats.errors > 0 {
                verbs.push(VerbFigures::of(&stats));
                out.report(&format!("{}:", rec.name()), stats, "\n");
            }
        }
        let summary = K8sSummary {
            found,
            seeded,
            seed_secs,
            nodes: nodes.count(),
            load_secs: load_secs.as_secs_f64(),
            verbs,
            lists_checked: checks.checked.load(Ordering::Relaxed),
            lists_inconsistent: checks.inconsistent.load(Ordering::Relaxed),
            watch,
            watch_caught_up,
            compactor,
            conflicts: shared.conflicts.load(Ordering::Relaxed),
            server,
        };
        out.print(&summary.to_text());
        out.extra("k8s", &summary);
        Some(summary)
    }
}

/// Every object of `resource` now, page by page (the apiserver's initial list).
async fn list_all(
    kv: &mut KvClient<Conn>,
    resource: &Resource,
    page: (i64, Duration),
) -> Result<Vec<Object>, String> {
    let mut objects = Vec::new();
    store::list(kv, &prefix(resource), page, None, |p| {
        objects.extend(p.kvs.iter().map(|kv| Object { key: kv.key.clone(), mod_revision: kv.mod_revision }));
        Ok(())
    })
    .await
    .map_err(|e| format!("listing {}: {e}", resource.name))?;
    Ok(objects)
}

/// The Lease of every node, created where missing.
async fn node_leases(
    channels: &[Conn],
    shared: &Arc<Shared>,
    nodes: usize,
    page: (i64, Duration),
) -> Result<Nodes, String> {
    let mut kv = kv_client(channels[0].clone());
    let found: HashMap<_, _> =
        list_all(&mut kv, &NODE_LEASES, page).await?.into_iter().map(|o| (o.key, o.mod_revision)).collect();
    let made = futures::stream::iter(0..nodes)
        .map(|n| {
            let key = Nodes::key(n);
            let known = found.get(&key).copied();
            let mut kv = kv_client(channel_for(channels, n));
            let shared = shared.clone();
            async move {
                if let Some(mod_revision) = known {
                    return Ok(Object { key, mod_revision });
                }
                let value = shared.bodies.body(&NODE_LEASES, &mut Rng::new());
                let mod_revision = bounded(page.1, store::create(&mut kv, key.clone(), value, 0))
                    .await
                    .map_err(|e| format!("creating node lease {n}: {e}"))?;
                Ok(Object { key, mod_revision })
            }
        })
        .buffered(CREATE_NODES_AT_ONCE)
        .collect::<Vec<Result<Object, String>>>()
        .await;
    Ok(Nodes(std::sync::Mutex::new(made.into_iter().collect::<Result<_, _>>()?)))
}
