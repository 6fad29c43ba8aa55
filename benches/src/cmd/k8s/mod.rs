//! `k8s`: the traffic a Kubernetes apiserver sends its etcd, shaped as the apiserver's storage
//! layer (k8s.io/apiserver pkg/storage/etcd3) sends it.
//!
//! Objects live under /registry/<type>/<namespace>/<name> with sizes of 1–10 KiB by type. The
//! run first does what an apiserver's start does: lists every type (to learn its objects and
//! their revisions) and creates objects up to `--objects` and one Lease per node; then, for
//! `--duration`, all at once:
//! - writes at `--rate`: creates (Txn mod_revision = 0, Put), updates (GuaranteedUpdate:
//!   Txn mod_revision = seen, Put, else Get), deletes (the same with Delete) and events (created
//!   on a shared lease from LeaseGrant, reused for a while, never kept alive), by `--write-mix`;
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
use self::periodic::{count_all, status, Compactor, Ticker};
use self::reads::{FreshReader, ListChecks, Lister};
use self::resources::{prefix, watched, Bodies, Object, Objects, Resource, NODE_LEASES, RESOURCES};
use self::server::{Sampler, ServerUsage};
use self::watch::{WatchCache, WatchCounts};
use self::writes::{Mix, Namer, Nodes, Renewer, Seeder, Shared, Writer, VERBS};
use crate::conn::{channel_for, connect, kv_client, Conn};
use crate::keys::Rng;
use crate::output::Out;
use crate::report::{Recorder, Stats};
use crate::runner::{run_load, OpError, Plan};
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
/// Node leases created at once at the start.
const CREATE_NODES_AT_ONCE: usize = 64;

/// `k8s`'s flags.
#[derive(Debug, Clone, Args)]
pub struct K8sArgs {
    /// Objects in the store (pods, replicasets, configmaps, secrets, endpointslices, services,
    /// deployments, serviceaccounts by share); created before the load when fewer exist.
    #[arg(long, default_value_t = 10_000)]
    pub objects: u64,
    /// Namespaces the new objects spread over.
    #[arg(long, default_value_t = 100)]
    pub namespaces: u64,
    /// Nodes, each renewing its Lease (0: one per 100 objects).
    #[arg(long, default_value_t = 0)]
    pub nodes: usize,
    /// How long the load runs (after the start's lists and creates).
    #[arg(long, default_value = "1m", value_parser = parse_go_duration)]
    pub duration: Duration,
    /// Write verbs (create, update, delete, event) per second.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Weights of create, update, delete and event among the writes.
    #[arg(long, default_value = "1,6,1,2", value_parser = Mix::parse)]
    pub write_mix: Mix,
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
    /// Clients doing consistent reads (each waits for the watch stream's progress).
    #[arg(long, default_value_t = 16)]
    pub read_clients: usize,
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
    /// The TTL of events (their leases are granted for it plus the reuse window).
    #[arg(long, default_value = "1h", value_parser = parse_go_duration)]
    pub event_ttl: Duration,
    /// The server's pid, to report its RSS and CPU (when it runs on this machine).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// One verb's figures in the closing table.
#[derive(Debug, Clone, Serialize)]
pub struct VerbFigures {
    /// The verb.
    pub verb: String,
    /// Successes.
    pub requests: u64,
    /// Failures.
    pub errors: u64,
    /// Successes per second of the load.
    pub qps: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// The most frequent error, if any.
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

/// What a run did, checked.
#[derive(Debug, Clone, Serialize)]
pub struct K8sSummary {
    /// Objects found at the start.
    pub found: u64,
    /// Objects created before the load to reach `--objects`.
    pub seeded: u64,
    /// Seconds the start (lists and creates) took.
    pub seed_secs: f64,
    /// Nodes renewing leases.
    pub nodes: usize,
    /// Seconds the load ran.
    pub load_secs: f64,
    /// Per verb.
    pub verbs: Vec<VerbFigures>,
    /// Lists checked.
    pub lists_checked: u64,
    /// Lists whose pages did not add up to their count at the pinned revision.
    pub lists_inconsistent: u64,
    /// What the watch stream delivered.
    pub watch: WatchCounts,
    /// Whether the watch stream reached the store's last revision after the load.
    pub watch_caught_up: bool,
    /// What the compactor did.
    pub compactor: Compactor,
    /// Conflicts retried by updates and deletes.
    pub conflicts: u64,
    /// The server's RSS and CPU, with `--server-pid`.
    pub server: Option<ServerUsage>,
}

impl K8sSummary {
    /// The figures of `verb`.
    pub fn verb(&self, verb: &str) -> Option<&VerbFigures> {
        self.verbs.iter().find(|v| v.verb == verb)
    }

    /// The closing table.
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
        if let Some(server) = &self.server {
            s += &server.to_text();
        }
        s
    }
}

impl K8sArgs {
    /// Checks the flags.
    pub fn validate(&self) -> Result<(), String> {
        if self.objects == 0 || self.namespaces == 0 {
            return Err("--objects and --namespaces must be at least 1".to_string());
        }
        for (flag, d) in [("--duration", self.duration), ("--node-lease-interval", self.node_lease_interval)]
        {
            if d.is_zero() {
                return Err(format!("{flag} must be above 0"));
            }
        }
        if self.event_ttl < Duration::from_secs(1) {
            return Err("--event-ttl must be at least 1s".to_string());
        }
        for (flag, r) in [
            ("--rate", self.rate),
            ("--list-rate", self.list_rate),
            ("--consistent-read-rate", self.consistent_read_rate),
        ] {
            if !(r.is_finite() && r >= 0.0) {
                return Err(format!("{flag} must be 0 or more, got {r}"));
            }
        }
        if self.page_size < 1 || self.read_clients == 0 {
            return Err("--page-size and --read-clients must be at least 1".to_string());
        }
        Ok(())
    }

    fn nodes(&self) -> usize {
        if self.nodes > 0 {
            self.nodes
        } else {
            (self.objects / 100).max(1) as usize
        }
    }

    /// Runs `k8s`.
    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        self.load(settings, stop, out).await;
    }

    /// Runs the load and reports it; the summary, `None` when it stopped before the load.
    pub async fn load(self, settings: &Settings, stop: &Stop, out: &Out) -> Option<K8sSummary> {
        let a = self;
        let channels = connect(settings, stop, out, &["k8s"]).await?;
        let bound = settings.request_timeout;
        let mut kv = kv_client(channels[0].clone());
        let started = Instant::now();

        // The start: what is there, then creates up to the target.
        let objects = Objects::new();
        for (t, resource) in RESOURCES.iter().enumerate() {
            let found = stop.check(list_all(&mut kv, resource, a.page_size, bound).await)?;
            for o in found {
                objects.pools[t].put(o);
            }
        }
        let found = objects.total() as u64;
        let grants = Arc::new(Recorder::new("lease-grant", 1, settings.sample));
        let shared = Arc::new(Shared {
            objects,
            bodies: Bodies::new(),
            namer: Namer::new(a.namespaces),
            leases: LeaseManager::new(channels[0].clone(), a.event_ttl, grants.clone()),
            conflicts: AtomicU64::new(0),
        });
        let writer = |c: usize| Writer {
            kv: kv_client(channel_for(&channels, c)),
            rng: Rng::new(),
            mix: a.write_mix,
            shared: shared.clone(),
        };
        let seeded = a.objects.saturating_sub(found);
        if seeded > 0 {
            out.print(&format!("k8s: {found} objects found, creating {seeded}\n"));
            let rec = Arc::new(Recorder::new("seed", settings.clients, false));
            let seeders = (0..settings.clients).map(|c| Seeder(writer(c))).collect();
            run_load(settings, stop, Plan::new(seeded, 0), std::slice::from_ref(&rec), seeders).await;
            let s = rec.stats(Duration::ZERO);
            if s.errors > 0 {
                let first = s.error_distribution.first().map(|e| e.error.clone()).unwrap_or_default();
                stop.stop(format!("creating the objects failed {} times: {first}", s.errors));
            }
        }
        let nodes =
            Arc::new(stop.check(node_leases(&channels, &shared, a.nodes(), a.page_size, bound).await)?);
        if stop.is_stopped() {
            return None;
        }
        let seed_secs = started.elapsed().as_secs_f64();

        // The watch cache starts where the lists ended.
        let (_, revision) =
            stop.check(with_bound(bound, store::count(&mut kv, &prefix(&RESOURCES[0]))).await)?;
        let prefixes: Vec<_> = watched().map(|r| prefix(&r)).collect();
        let cache =
            stop.check(WatchCache::open(channels[0].clone(), &prefixes, revision + 1, bound).await)?;
        let sampler = a.server_pid.and_then(|pid| match Sampler::start(pid) {
            Ok(s) => Some(s),
            Err(e) => {
                out.note(format!("--server-pid {pid}: {e}; the server's figures are left out"));
                None
            }
        });

        let recs = Recs::new(settings);
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
                page_size: a.page_size,
                pages: recs.pages.clone(),
                checks: checks.clone(),
                client: c,
            })
            .collect();
        let readers: Vec<FreshReader> = (0..a.read_clients)
            .map(|c| FreshReader { kv: kv_client(channel_for(&channels, c)), cache: cache.cache.clone() })
            .collect();
        let renew_rate = nodes.len() as f64 / a.node_lease_interval.as_secs_f64();
        let plan = |rate: f64| Plan::for_duration(rate, a.duration).quiet();
        let mut compactor = Compactor::default();
        let mut m = MaintenanceClient::new(channels[0].clone());
        let (mut count_kv, mut compact_kv) = (kv.clone(), kv.clone());
        let load = async {
            tokio::join!(
                run_load(settings, stop, Plan::for_duration(a.rate, a.duration), &recs.writes, writers),
                run_load(settings, stop, plan(renew_rate), std::slice::from_ref(&recs.renew), renewers),
                async {
                    if a.list_rate > 0.0 {
                        run_load(
                            settings,
                            stop,
                            plan(a.list_rate),
                            std::slice::from_ref(&recs.list),
                            listers,
                        )
                        .await;
                    }
                },
                async {
                    if a.consistent_read_rate > 0.0 {
                        let r = std::slice::from_ref(&recs.fresh);
                        run_load(settings, stop, plan(a.consistent_read_rate), r, readers).await;
                    }
                },
                async {
                    let Some(mut clock) = Ticker::new(Duration::ZERO, a.count_interval, end) else { return };
                    while clock.next().await {
                        count_all(&mut count_kv, &recs.count, bound).await;
                    }
                },
                async {
                    let Some(mut clock) = Ticker::new(Duration::ZERO, a.status_interval, end) else { return };
                    while clock.next().await {
                        status(&mut m, &recs.status, bound).await;
                    }
                },
                async {
                    let Some(mut clock) = Ticker::new(a.compact_interval, a.compact_interval, end) else {
                        return;
                    };
                    while clock.next().await {
                        compactor.round(&mut compact_kv, &recs.compact, bound).await;
                    }
                },
            )
        };
        let mut stopped = stop.subscribe();
        tokio::select! {
            _ = load => {}
            _ = Stop::stopped(&mut stopped) => {}
        }
        let load_secs = load_started.elapsed();

        // The watch has seen every write once it reaches the store's revision now.
        let last = with_bound(bound, store::count(&mut kv, &prefix(&RESOURCES[0]))).await.map(|(_, r)| r);
        let watch_caught_up = match last {
            Ok(r) => matches!(tokio::time::timeout(bound, cache.cache.wait_fresh(r)).await, Ok(Ok(()))),
            Err(_) => false,
        };
        let watch = cache.cache.counts();
        cache.close();
        let server = sampler.and_then(Sampler::finish);

        let mut verbs = Vec::new();
        let mut all = recs.all();
        all.push(&grants);
        for rec in all {
            let stats = rec.stats(load_secs);
            if stats.requests + stats.errors == 0 {
                continue;
            }
            verbs.push(VerbFigures::of(&stats));
            out.report(&format!("{}:", rec.name()), stats, "\n");
        }
        let summary = K8sSummary {
            found,
            seeded,
            seed_secs,
            nodes: nodes.len(),
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
        match serde_json::to_value(&summary) {
            Ok(v) => out.extra("k8s", v),
            Err(e) => out.note(format!("cannot encode the k8s summary: {e}")),
        }
        Some(summary)
    }
}

/// The recorders of the load, one per verb.
struct Recs {
    writes: Vec<Arc<Recorder>>,
    renew: Arc<Recorder>,
    list: Arc<Recorder>,
    pages: Arc<Recorder>,
    fresh: Arc<Recorder>,
    count: Recorder,
    status: Recorder,
    compact: Recorder,
}

impl Recs {
    fn new(settings: &Settings) -> Self {
        let rec = |name: &str, clients: usize| Arc::new(Recorder::new(name, clients, settings.sample));
        Self {
            writes: VERBS.iter().map(|v| rec(v, settings.clients)).collect(),
            renew: rec("node-lease", RENEW_CLIENTS),
            list: rec("list", LIST_CLIENTS),
            pages: rec("list-page", LIST_CLIENTS),
            fresh: rec("consistent-read", 16),
            count: Recorder::new("count", 1, settings.sample),
            status: Recorder::new("status", 1, settings.sample),
            compact: Recorder::new("compact", 1, settings.sample),
        }
    }

    fn all(&self) -> Vec<&Recorder> {
        let mut all: Vec<&Recorder> = self.writes.iter().map(|r| r.as_ref()).collect();
        all.extend([
            &*self.renew,
            &*self.list,
            &*self.pages,
            &*self.fresh,
            &self.count,
            &self.status,
            &self.compact,
        ]);
        all
    }
}

async fn with_bound<T>(
    bound: Duration,
    call: impl std::future::Future<Output = Result<T, OpError>>,
) -> Result<T, String> {
    match tokio::time::timeout(bound, call).await {
        Ok(r) => r.map_err(|e| e.text),
        Err(_) => Err(format!("request timed out after {bound:?} (--request-timeout)")),
    }
}

/// Every object of `resource` now, page by page (the apiserver's initial list).
async fn list_all(
    kv: &mut KvClient<Conn>,
    resource: &Resource,
    page_size: i64,
    bound: Duration,
) -> Result<Vec<Object>, String> {
    let p = prefix(resource);
    let (mut from, mut pinned, mut objects) = (p.clone(), 0, Vec::new());
    loop {
        let page = with_bound(bound, store::list_page(kv, &p, from.clone(), page_size, pinned))
            .await
            .map_err(|e| format!("listing {}: {e}", resource.name))?;
        if pinned == 0 {
            pinned = page.header.as_ref().map_or(0, |h| h.revision);
        }
        objects
            .extend(page.kvs.iter().map(|kv| Object { key: kv.key.clone(), mod_revision: kv.mod_revision }));
        match page.kvs.last() {
            Some(kv) if page.more => from = store::after(&kv.key),
            _ => return Ok(objects),
        }
    }
}

/// The Lease of every node, created where missing.
async fn node_leases(
    channels: &[Conn],
    shared: &Arc<Shared>,
    nodes: usize,
    page_size: i64,
    bound: Duration,
) -> Result<Nodes, String> {
    let mut kv = kv_client(channels[0].clone());
    let found: HashMap<_, _> = list_all(&mut kv, &NODE_LEASES, page_size, bound)
        .await?
        .into_iter()
        .map(|o| (o.key, o.mod_revision))
        .collect();
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
                let mod_revision = with_bound(bound, store::create(&mut kv, key.clone(), value, 0))
                    .await
                    .map_err(|e| format!("creating node lease {n}: {e}"))?;
                Ok(Object { key, mod_revision })
            }
        })
        .buffered(CREATE_NODES_AT_ONCE)
        .collect::<Vec<Result<Object, String>>>()
        .await;
    let leases = made.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(Nodes { leases: std::sync::Mutex::new(leases) })
}
