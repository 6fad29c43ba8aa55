//! `stm`: etcd benchmark's STM load. Each of `--total` transactions picks `--keys-per-txn`
//! distinct keys among `--keys` (16-byte varint keys), gets each and puts a fresh random value
//! of `--val-size` to the first `--txn-wr-percent` percent of them, as one software
//! transactional memory transaction at `--isolation`, retried until it commits. With
//! `--stm-locker lock-client` or `lock-rpc` each transaction runs under a lock as well. A
//! transaction's latency runs from taking the lock (or starting) to releasing it, retries
//! included; `--rate` limits the attempts per second over all clients, as etcd's limiter does.

pub mod lock;
pub mod txn;

use crate::conn::{channel_for, connect, kv_client, status_text, Conn, OpError};
use crate::keys::{random_bytes, varint_key, Rng};
use crate::output::Out;
use crate::runner::{run_report, Plan, Worker};
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use bytes::Bytes;
use clap::Args;
use lock::{Mutex, RpcLock, Session};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use txn::{Commit, Isolation, Stm};

/// The size of an STM key (etcd benchmark's).
const KEY_SIZE: usize = 16;

#[derive(Debug, Clone, Args)]
pub struct StmArgs {
    /// Read Committed (c), Repeatable Reads (r), Serializable (s), or Snapshot (ss).
    #[arg(long, value_enum, default_value = "r")]
    pub isolation: Isolation,
    /// Total unique keys accessible by the benchmark.
    #[arg(long, default_value_t = 1)]
    pub keys: u64,
    /// Total number of completed STM transactions.
    #[arg(long, default_value_t = 10000)]
    pub total: u64,
    /// Number of keys to access per transaction.
    #[arg(long, default_value_t = 1)]
    pub keys_per_txn: u64,
    /// Percentage of keys to overwrite per transaction.
    #[arg(long, default_value_t = 50)]
    pub txn_wr_percent: u64,
    /// Wrap STM transaction with a custom locking mechanism (stm, lock-client, lock-rpc).
    #[arg(long, value_enum, default_value = "stm")]
    pub stm_locker: Locker,
    /// Value size of each STM put request.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Maximum STM transactions per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
}

/// `--stm-locker`: no lock (the STM's own conflict checks only), etcd's client-side mutex, or
/// the server's Lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Locker {
    Stm,
    LockClient,
    LockRpc,
}

impl StmArgs {
    pub fn validate(&self) -> Result<(), String> {
        if self.keys == 0 {
            return Err(format!("expected positive --keys, got ({})", self.keys));
        }
        if self.txn_wr_percent > 100 {
            return Err(format!("expected [0, 100] --txn-wr-percent, got ({})", self.txn_wr_percent));
        }
        if self.keys_per_txn > self.keys {
            return Err(format!(
                "expected --keys-per-txn between 0 and {}, got ({})",
                self.keys, self.keys_per_txn
            ));
        }
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let (isolation, locker) = (self.isolation, self.stm_locker);
        let Some(channels) = connect(settings, stop, out, &["stm"]).await else { return };
        let mut sessions = Vec::new();
        for c in (0..settings.clients).filter(|_| locker != Locker::Stm) {
            match Session::open(channel_for(&channels, c)).await {
                Ok(s) => sessions.push(s),
                Err(s) => return stop.stop(format!("cannot open a lock session: {}", status_text(&s))),
            }
        }
        let limiter = Arc::new(Limiter::new(self.rate));
        let workers: Vec<StmWorker> = (0..settings.clients)
            .map(|c| {
                let channel = channel_for(&channels, c);
                let lease = sessions.get(c).map_or(0, |s| s.lease);
                StmWorker {
                    kv: kv_client(channel.clone()),
                    rng: Rng::new(),
                    isolation,
                    lock: match locker {
                        Locker::Stm => Lock::None,
                        Locker::LockClient => Lock::Client(Box::new(Mutex::new(channel, lease))),
                        Locker::LockRpc => Lock::Rpc(Box::new(RpcLock::new(channel, lease))),
                    },
                    keys: self.keys,
                    per_txn: self.keys_per_txn as usize,
                    writes: (self.keys_per_txn * self.txn_wr_percent / 100) as usize,
                    val_size: self.val_size,
                    limiter: limiter.clone(),
                }
            })
            .collect();
        run_report((settings, stop, out), "stm", Plan::new(self.total, 0), workers, "").await;
        for s in sessions {
            s.close(settings.request_timeout).await;
        }
    }
}

/// etcd's `rate.Limiter` with a burst of one, shared by the clients: attempts start at least
/// `1 / rate` apart.
struct Limiter {
    interval: Option<Duration>,
    next: std::sync::Mutex<Instant>,
}

impl Limiter {
    fn new(rate: u64) -> Self {
        let interval = (rate > 0).then(|| Duration::from_secs_f64(1.0 / rate as f64));
        Self { interval, next: std::sync::Mutex::new(Instant::now()) }
    }

    async fn wait(&self) {
        let Some(interval) = self.interval else { return };
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + interval;
            at
        };
        tokio::time::sleep_until(at.into()).await;
    }
}

enum Lock {
    None,
    // Boxed: each holds clients of a few hundred bytes (tokened connections), once per worker.
    Client(Box<Mutex>),
    Rpc(Box<RpcLock>),
}

struct StmWorker {
    kv: KvClient<Conn>,
    rng: Rng,
    isolation: Isolation,
    lock: Lock,
    keys: u64,
    per_txn: usize,
    writes: usize,
    val_size: usize,
    limiter: Arc<Limiter>,
}

impl StmWorker {
    fn pick_keys(&mut self) -> Vec<Bytes> {
        let mut picked: Vec<u64> = Vec::with_capacity(self.per_txn);
        while picked.len() < self.per_txn {
            let n = self.rng.u64(..self.keys);
            if !picked.contains(&n) {
                picked.push(n);
            }
        }
        picked.into_iter().map(|n| Bytes::from(varint_key(n, KEY_SIZE))).collect()
    }

    async fn transaction(&mut self) -> Result<(), OpError> {
        let keys = self.pick_keys();
        let Self { kv, isolation, lock, writes, val_size, limiter, .. } = self;
        match lock {
            Lock::None => {}
            Lock::Client(m) => m.lock().await?,
            Lock::Rpc(l) => l.lock().await?,
        }
        let mut stm = Stm::new(kv, *isolation);
        let result = loop {
            limiter.wait().await;
            match attempt(&mut stm, &keys, *writes, *val_size).await {
                Ok(Commit::Done) => break Ok(()),
                Ok(Commit::Retry) => continue,
                Err(s) => break Err(OpError::from(s)),
            }
        };
        match lock {
            Lock::None => {}
            Lock::Client(m) => m.unlock().await?,
            Lock::Rpc(l) => l.unlock().await?,
        }
        result
    }
}

/// One attempt of the benchmark's transaction: get every key, put a fresh value to the first
/// `writes` of them, commit.
async fn attempt(
    stm: &mut Stm<'_>,
    keys: &[Bytes],
    writes: usize,
    val_size: usize,
) -> Result<Commit, tonic::Status> {
    stm.reset();
    for (i, key) in keys.iter().enumerate() {
        stm.get(key).await?;
        if i < writes {
            stm.put(key.clone(), Bytes::from(random_bytes(val_size)));
        }
    }
    stm.commit().await
}

impl Worker for StmWorker {
    fn call(&mut self, _i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, self.transaction())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Result<(), String> {
        crate::execute::parse_flags::<StmArgs>(args).and_then(|a| a.validate())
    }

    #[test]
    fn flags_are_checked_as_etcd_checks_them() {
        assert!(check(&[]).is_ok());
        assert!(check(&["--keys=4", "--keys-per-txn=4", "--isolation=ss", "--stm-locker=lock-rpc"]).is_ok());
        for bad in [
            &["--keys=0"][..],
            &["--txn-wr-percent=101"],
            &["--keys=4", "--keys-per-txn=5"],
            &["--isolation=x"],
            &["--stm-locker=x"],
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn the_limiter_spaces_attempts() {
        let l = Limiter::new(100);
        let start = Instant::now();
        for _ in 0..4 {
            l.wait().await;
        }
        // The first is at once, the next three 10 ms apart.
        assert!(start.elapsed() >= Duration::from_millis(30), "{:?}", start.elapsed());
        let unlimited = Limiter::new(0);
        let start = Instant::now();
        unlimited.wait().await;
        assert!(start.elapsed() < Duration::from_millis(10));
    }
}
