//! `put`: puts of `--key-size` keys (random or sequential key numbers in `--key-space-size`) and
//! one random `--val-size` value, optionally compacting every `--compact-interval`, and reading
//! HashKV and Status after the run with `--check-hashkv`. Also the flags it shares with
//! `txn-put` and `txn-mixed` ([`Load`]).

use crate::conn::{bounded, channel_for, connect, kv_client, Conn, OpError};
use crate::format::humanize_bytes;
use crate::keys::{check_key_space, random_bytes, varint_key, Rng};
use crate::output::Out;
use crate::runner::{run_report, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::{CompactionRequest, HashKvRequest, PutRequest, RangeRequest, StatusRequest};
use actcd_proto::go_duration::{self, parse as parse_go_duration};
use bytes::Bytes;
use clap::{ArgAction, Args};
use std::future::Future;
use std::time::{Duration, Instant};

/// The flags `put`, `txn-put` and `txn-mixed` share, with etcd's defaults.
#[derive(Debug, Clone, Args)]
pub struct Load {
    /// Key size of each request.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of each request.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Maximum requests per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Total number of requests.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
}

impl Load {
    pub fn validate(&self) -> Result<(), String> {
        check_key_space(self.key_size, self.key_space_size)
    }

    pub fn plan(&self) -> Plan {
        Plan::new(self.total, self.rate)
    }

    pub fn value(&self) -> Bytes {
        Bytes::from(random_bytes(self.val_size))
    }
}

#[derive(Debug, Clone, Args)]
pub struct PutArgs {
    #[command(flatten)]
    pub load: Load,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub sequential_keys: bool,
    /// Interval to compact the database (e.g. 5m; 0 never).
    #[arg(long, default_value = "0", value_parser = parse_go_duration)]
    pub compact_interval: Duration,
    /// Delta between the current revision and the compact revision.
    #[arg(long, default_value_t = 1000)]
    pub compact_index_delta: i64,
    /// Check HashKV (and Status) of the first endpoint after the run.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub check_hashkv: bool,
}

struct PutWorker {
    kv: KvClient<Conn>,
    rng: Rng,
    key_size: usize,
    key_space: u64,
    sequential: bool,
    value: Bytes,
}

impl Worker for PutWorker {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let n = if self.sequential { i % self.key_space } else { self.rng.u64(..self.key_space) };
        let key = Bytes::from(varint_key(n, self.key_size));
        let req = PutRequest { key, value: self.value.clone(), ..Default::default() };
        (0, async move { self.kv.put(req).await.map(|_| ()).map_err(OpError::from) })
    }
}

impl PutArgs {
    /// `total` puts of `key_space` sequential keys (each key `total / key_space` times).
    pub fn sequential(key_size: usize, val_size: usize, total: u64, key_space_size: u64) -> Self {
        Self {
            load: Load { key_size, val_size, rate: 0, total, key_space_size },
            sequential_keys: true,
            compact_interval: Duration::ZERO,
            compact_index_delta: 1000,
            check_hashkv: false,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.load.validate()?;
        if !self.compact_interval.is_zero() && self.compact_index_delta < 0 {
            return Err(format!(
                "--compact-index-delta must not be negative, got {}",
                self.compact_index_delta
            ));
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let a = self;
        let Some(channels) = connect(settings, stop, out, &["put"]).await else { return };
        let compactor = (!a.compact_interval.is_zero()).then(|| {
            let kv = kv_client(channels[0].clone());
            tokio::spawn(compact_loop(
                kv,
                a.compact_interval,
                a.compact_index_delta,
                settings.request_timeout,
            ))
        });
        let value = a.load.value();
        let workers = (0..settings.clients)
            .map(|c| PutWorker {
                kv: kv_client(channel_for(&channels, c)),
                rng: Rng::new(),
                key_size: a.load.key_size,
                key_space: a.load.key_space_size,
                sequential: a.sequential_keys,
                value: value.clone(),
            })
            .collect();
        run_report((settings, stop, out), "put", a.load.plan(), workers, "\n").await;
        if let Some(c) = compactor {
            c.abort();
        }
        if a.check_hashkv && !stop.is_stopped() {
            hash_kv(settings, out, channels[0].clone()).await;
        }
    }
}

/// Every `interval`, reads the current revision and compacts `delta` revisions behind it.
/// Failures are warnings: the put load goes on.
async fn compact_loop(mut kv: KvClient<Conn>, interval: Duration, delta: i64, bound: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let range = RangeRequest { key: Bytes::from_static(b"foo"), ..Default::default() };
        let rev = match bounded(bound, kv.range(range)).await {
            Ok(r) => r.into_inner().header.map_or(0, |h| h.revision),
            Err(e) => {
                eprintln!("warning: compaction skipped: cannot read the revision: {e}");
                continue;
            }
        };
        let target = rev - delta;
        if target > 0 {
            if let Err(e) =
                bounded(bound, kv.compact(CompactionRequest { revision: target, physical: false })).await
            {
                eprintln!("warning: compaction at revision {target} failed: {e}");
            }
        }
    }
}

/// `--check-hashkv`: HashKV and Status of the first endpoint, as etcd's `HashKV Summary`.
async fn hash_kv(settings: &Settings, out: &Out, channel: Conn) {
    let endpoint = settings.endpoints[0].clone();
    let mut m = MaintenanceClient::new(channel);
    let bound = settings.request_timeout;
    let st = Instant::now();
    let hash = match bounded(bound, m.hash_kv(HashKvRequest { revision: 0 })).await {
        Ok(h) => h.into_inner(),
        Err(e) => return out.note(format!("Failed to get the hashkv of endpoint {endpoint} ({e})")),
    };
    let took = st.elapsed();
    let status = match bounded(bound, m.status(StatusRequest {})).await {
        Ok(s) => s.into_inner(),
        Err(e) => return out.note(format!("Failed to get the status of endpoint {endpoint} ({e})")),
    };
    let db_size = u64::try_from(status.db_size).unwrap_or(0);
    out.print(&format!(
        "HashKV Summary:\n\tHashKV: {}\n\tEndpoint: {endpoint}\n\tTime taken to get hashkv: {}\n\tDB size: {}\n",
        hash.hash,
        go_duration::format(took),
        humanize_bytes(db_size)
    ));
    let secs = took.as_secs_f64();
    let figures = serde_json::json!({"hash": hash.hash, "compact_revision": hash.compact_revision, "endpoint": endpoint, "secs": secs, "db_size": db_size});
    out.extra("hashkv", figures);
}
