//! /livez and /readyz as etcd 3.6 answers them (docs/etcd-health.md has the source reading).
//!
//! Each path runs a fixed set of named checks, one after another and all of them (no
//! short-circuit: the body lists every failure):
//!
//! ```text
//!   /livez    serializable_read                       is the process serving reads at all?
//!   /readyz   data_corruption    no CORRUPT alarm     should a load balancer send it traffic?
//!             serializable_read  a local read
//!             linearizable_read  a read index from a quorum (fails without one)
//!             non_learner        a voter, not a learner
//! ```
//!
//! `/livez/<check>` and `/readyz/<check>` run that one check. On the root paths `?exclude=NAME`
//! (repeated, each value whole: no comma splitting) leaves checks out; a name that is no check
//! is logged and ignored. `?verbose` (any value) lists the checks on success too.
//!
//! ```text
//!   all pass, plain     200  "ok\n"
//!   all pass, verbose   200  "[+]serializable_read ok\n" ... "ok\n"
//!   any fails           503  "[+]serializable_read ok\n[-]linearizable_read failed: etcdserver: request timed out\n" ... "\n"
//! ```
//!
//! Every check run sets `etcd_server_healthcheck{type,name}` (1 or 0) and counts
//! `etcd_server_healthchecks_total{type,name,status}`. The order of the lines is the table's
//! (etcd's is a Go map's, random per request).

use actcd_edge::status::to_status;
use actcd_proto::etcdserverpb::{AlarmType, RangeRequest};
use actcd_store::metric_names::{ETCD_SERVER_HEALTHCHECK, ETCD_SERVER_HEALTHCHECKS_TOTAL};
use axum::http::StatusCode;
use bytes::Bytes;

use crate::grpc::store_handle::StoreHandle;

/// The two probe paths, also the `type` label of their metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Whether the process serves at all: a restart is the cure when it fails.
    Livez,
    /// Whether the member should get traffic: it may recover by itself.
    Readyz,
}

/// One named check (the table above says what each asks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// No CORRUPT alarm is active on any member.
    DataCorruption,
    /// A local read answers.
    SerializableRead,
    /// A read through the cluster's read index answers (needs a quorum).
    LinearizableRead,
    /// This member votes.
    NonLearner,
}

impl Probe {
    /// The path's name, and the `type` label.
    pub fn name(self) -> &'static str {
        match self {
            Probe::Livez => "livez",
            Probe::Readyz => "readyz",
        }
    }

    /// The checks the root path runs, in the order the body lists them.
    pub fn checks(self) -> &'static [Check] {
        match self {
            Probe::Livez => &[Check::SerializableRead],
            Probe::Readyz => {
                &[Check::DataCorruption, Check::SerializableRead, Check::LinearizableRead, Check::NonLearner]
            }
        }
    }

    /// The check `/<probe>/<name>` runs, if `name` is one of this probe's.
    pub fn check_named(self, name: &str) -> Option<Check> {
        self.checks().iter().copied().find(|c| c.name() == name)
    }
}

impl Check {
    /// The check's name, in its sub-path, its body line and its `name` label.
    pub fn name(self) -> &'static str {
        match self {
            Check::DataCorruption => "data_corruption",
            Check::SerializableRead => "serializable_read",
            Check::LinearizableRead => "linearizable_read",
            Check::NonLearner => "non_learner",
        }
    }

    /// Runs the check against this member; the error is the text after `failed: `.
    async fn run(self, store: &StoreHandle) -> Result<(), String> {
        // etcd reads one key, keys only, and throws the answer away: only an error counts.
        let read = || {
            let probe = RangeRequest {
                key: Bytes::from_static(b"health"),
                keys_only: true,
                limit: 1,
                ..Default::default()
            };
            store.view.range(&probe).map(drop).map_err(|e| to_status(e).message().to_string())
        };
        match self {
            Check::DataCorruption => {
                let alarms =
                    store.view.alarms(AlarmType::Corrupt).map_err(|e| to_status(e).message().to_string())?;
                if alarms.is_empty() {
                    Ok(())
                } else {
                    Err("alarm activated: CORRUPT".to_string())
                }
            }
            Check::SerializableRead => read(),
            Check::LinearizableRead => {
                store.linearize().await.map_err(|s| s.message().to_string())?;
                read()
            }
            Check::NonLearner => {
                if store.is_learner() {
                    Err("not supported for learner".to_string())
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// What one request asks for: the checks to run, whether to list them on success, and the
/// excluded names that are no check of this probe (etcd logs them and goes on).
#[derive(Debug, PartialEq, Eq)]
pub struct Selection {
    /// In the order they run and are listed.
    pub checks: Vec<Check>,
    /// `?verbose`: list the checks on success too.
    pub verbose: bool,
    /// `?exclude=` names that are no check of this probe.
    pub unknown_excludes: Vec<String>,
}

impl Selection {
    /// The root path `/<probe>` with `query` (the raw query string, if any).
    pub fn root(probe: Probe, query: Option<&str>) -> Self {
        let (verbose, excluded) = parse_query(query);
        let checks =
            probe.checks().iter().copied().filter(|c| !excluded.iter().any(|e| e == c.name())).collect();
        let unknown_excludes = excluded.into_iter().filter(|e| probe.check_named(e).is_none()).collect();
        Self { checks, verbose, unknown_excludes }
    }

    /// The sub-path `/<probe>/<check>`: that check alone, `exclude` ignored.
    pub fn one(check: Check, query: Option<&str>) -> Self {
        Self { checks: vec![check], verbose: parse_query(query).0, unknown_excludes: Vec::new() }
    }
}

/// `verbose` present (any value, as Go's `Query()["verbose"]`), and every non-empty `exclude`
/// value, percent-decoded as Go decodes a query.
fn parse_query(query: Option<&str>) -> (bool, Vec<String>) {
    let mut verbose = false;
    let mut excluded = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "verbose" => verbose = true,
            "exclude" if !value.is_empty() => excluded.push(value.into_owned()),
            _ => {}
        }
    }
    (verbose, excluded)
}

/// Runs `selection`'s checks for `probe` one after another, records each in the metrics, and
/// returns the status and body.
pub async fn answer(probe: Probe, selection: &Selection, store: &StoreHandle) -> (StatusCode, String) {
    if !selection.unknown_excludes.is_empty() {
        let missing: Vec<String> = selection.unknown_excludes.iter().map(|e| format!("{e:?}")).collect();
        tracing::warn!(missing_health_checks = %missing.join(","), "some health checks cannot be excluded");
    }
    let mut results = Vec::with_capacity(selection.checks.len());
    for &check in &selection.checks {
        let result = check.run(store).await;
        record(probe, check, result.is_ok());
        results.push((check, result));
    }
    body(&results, selection.verbose)
}

fn record(probe: Probe, check: Check, ok: bool) {
    let labels = [("type", probe.name()), ("name", check.name())];
    metrics::gauge!(ETCD_SERVER_HEALTHCHECK, &labels).set(if ok { 1.0 } else { 0.0 });
    let status = if ok { "success" } else { "error" };
    let labels = [("type", probe.name()), ("name", check.name()), ("status", status)];
    metrics::counter!(ETCD_SERVER_HEALTHCHECKS_TOTAL, &labels).increment(1);
}

/// The status and body for `results` (each check and its error), as etcd writes them.
pub fn body(results: &[(Check, Result<(), String>)], verbose: bool) -> (StatusCode, String) {
    let mut lines = String::new();
    for (check, result) in results {
        match result {
            Ok(()) => lines.push_str(&format!("[+]{} ok\n", check.name())),
            Err(err) => lines.push_str(&format!("[-]{} failed: {err}\n", check.name())),
        }
    }
    if results.iter().any(|(_, r)| r.is_err()) {
        // etcd answers a failure with http.Error, which adds a newline to the list.
        lines.push('\n');
        (StatusCode::SERVICE_UNAVAILABLE, lines)
    } else if verbose {
        lines.push_str("ok\n");
        (StatusCode::OK, lines)
    } else {
        (StatusCode::OK, "ok\n".to_string())
    }
}
