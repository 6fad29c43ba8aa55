//! Latency recording and the report.
//!
//! A [`Recorder`] takes results from many client tasks at once: latencies go into HDR histograms
//! (nanoseconds, 3 significant digits) split over a few mutex-guarded shards so that clients
//! rarely meet, next to exact count, sum, sum of squares, min and max (etcd's Summary figures are
//! exact). [`Recorder::stats`] merges the shards into [`Stats`], which prints in etcd benchmark's
//! text format ([`Stats::to_text`]) or serializes as JSON.

use crate::format::{go_g, num};
use actcd_proto::go_duration::format as go_duration;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The percentiles of etcd's "Latency distribution".
pub const PERCENTILES: [f64; 8] = [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// Buckets of etcd's "Response time histogram" (fastest, 9 steps, slowest).
pub const HISTOGRAM_BUCKETS: usize = 11;

/// The longest latency the histograms hold exactly (an hour); longer ones are recorded as this.
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

/// Most shards a recorder splits into; clients pick one by their number.
const MAX_SHARDS: usize = 16;

/// One second of `--sample`'s time series.
#[derive(Debug, Clone, Copy)]
struct SecondPoint {
    min_ns: u64,
    max_ns: u64,
    total_ns: u128,
    count: u64,
}

impl Default for SecondPoint {
    fn default() -> Self {
        Self { min_ns: u64::MAX, max_ns: 0, total_ns: 0, count: 0 }
    }
}

impl SecondPoint {
    fn add(&mut self, p: &SecondPoint) {
        self.min_ns = self.min_ns.min(p.min_ns);
        self.max_ns = self.max_ns.max(p.max_ns);
        self.total_ns += p.total_ns;
        self.count += p.count;
    }
}

/// What one shard of a recorder holds, and the shards merged.
struct Shard {
    hist: Histogram<u64>,
    count: u64,
    sum_ns: u128,
    sumsq_ns: u128,
    min_ns: u64,
    max_ns: u64,
    errors: HashMap<String, u64>,
    seconds: BTreeMap<u64, SecondPoint>,
}

impl Shard {
    fn new() -> Self {
        Self {
            hist: new_histogram(),
            count: 0,
            sum_ns: 0,
            sumsq_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            errors: HashMap::new(),
            seconds: BTreeMap::new(),
        }
    }

    fn add(&mut self, o: &Shard) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&o.hist);
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.sumsq_ns += o.sumsq_ns;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        for (e, n) in &o.errors {
            *self.errors.entry(e.clone()).or_default() += n;
        }
        for (sec, p) in &o.seconds {
            self.seconds.entry(*sec).or_default().add(p);
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).expect("hdrhistogram takes these constant bounds")
}

/// Collects the results of one kind of request (one report).
pub struct Recorder {
    name: String,
    shards: Box<[Mutex<Shard>]>,
    completed: AtomicU64,
    succeeded: AtomicU64,
    base: Instant,
    base_unix: Duration,
    sample: bool,
}

impl Recorder {
    /// A recorder for `clients` concurrent clients; `sample` keeps the per-second time series.
    pub fn new(name: impl Into<String>, clients: usize, sample: bool) -> Self {
        let shards = clients.clamp(1, MAX_SHARDS);
        Self {
            name: name.into(),
            shards: (0..shards).map(|_| Mutex::new(Shard::new())).collect(),
            completed: AtomicU64::new(0),
            succeeded: AtomicU64::new(0),
            base: Instant::now(),
            base_unix: SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(),
            sample,
        }
    }

    /// The report's name (the command, or `txn-mixed-read` and the like).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn shard(&self, client: usize) -> MutexGuard<'_, Shard> {
        let m = &self.shards[client % self.shards.len()];
        // A poisoned shard only means another client panicked mid-record; its data is still
        // consistent enough for a report.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a success that started (or was meant to start) at `start` and ended at `end`.
    pub fn ok(&self, client: usize, start: Instant, end: Instant) {
        let lat = end.saturating_duration_since(start);
        let ns = u64::try_from(lat.as_nanos()).unwrap_or(u64::MAX).clamp(1, MAX_TRACKED_NS);
        {
            let mut s = self.shard(client);
            s.hist.saturating_record(ns);
            s.count += 1;
            s.sum_ns += ns as u128;
            s.sumsq_ns += (ns as u128) * (ns as u128);
            s.min_ns = s.min_ns.min(ns);
            s.max_ns = s.max_ns.max(ns);
            if self.sample {
                let unix = (self.base_unix + start.saturating_duration_since(self.base)).as_secs();
                let p = SecondPoint { min_ns: ns, max_ns: ns, total_ns: ns as u128, count: 1 };
                s.seconds.entry(unix).or_default().add(&p);
            }
        }
        self.succeeded.fetch_add(1, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a failure; its text is the key of the error distribution.
    pub fn err(&self, client: usize, error: &str) {
        *self.shard(client).errors.entry(error.to_string()).or_default() += 1;
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// Results recorded so far, successes and failures.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Successes recorded so far.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }

    /// Merges the shards into the report's figures; `total` is the run's wall time.
    pub fn stats(&self, total: Duration) -> Stats {
        let mut all = Shard::new();
        for shard in self.shards.iter() {
            all.add(&shard.lock().unwrap_or_else(|p| p.into_inner()));
        }
        Stats::from_shard(self.name.clone(), total, all, self.sample)
    }
}

/// One bar of the response time histogram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bucket {
    /// The bucket's upper mark in seconds: it counts latencies above the previous mark up to
    /// this one.
    pub mark_secs: f64,
    /// Latencies in the bucket.
    pub count: u64,
}

/// One line of the latency distribution.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Percentile {
    /// The percentile (10 … 99.9).
    pub percent: f64,
    /// The latency in seconds.
    pub secs: f64,
}

/// One line of the error distribution.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ErrorCount {
    /// How often it happened.
    pub count: u64,
    /// The error text.
    pub error: String,
}

/// One second of the `--sample` time series.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// The Unix second in which the requests started.
    pub unix_second: u64,
    /// Fastest latency in that second, in seconds.
    pub min_secs: f64,
    /// Average latency in that second, in seconds.
    pub avg_secs: f64,
    /// Slowest latency in that second, in seconds.
    pub max_secs: f64,
    /// Successful requests started in that second.
    pub throughput: u64,
}

/// A finished report: etcd benchmark's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// The report's name.
    pub name: String,
    /// Wall time of the run, seconds.
    pub total_secs: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Slowest success, seconds.
    pub slowest_secs: f64,
    /// Fastest success, seconds.
    pub fastest_secs: f64,
    /// Mean latency, seconds.
    pub average_secs: f64,
    /// Standard deviation of the latency (population), seconds.
    pub stddev_secs: f64,
    /// Successes per second of wall time.
    pub requests_per_sec: f64,
    /// The response time histogram, 11 buckets from fastest to slowest.
    pub histogram: Vec<Bucket>,
    /// The latency distribution, 10 % to 99.9 %.
    pub latency_distribution: Vec<Percentile>,
    /// Errors by text, most frequent first.
    pub error_distribution: Vec<ErrorCount>,
    /// The per-second time series, with `--sample`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
}

const NS: f64 = 1e9;

impl Stats {
    fn from_shard(name: String, total: Duration, p: Shard, sample: bool) -> Self {
        let total_secs = total.as_secs_f64();
        let n = p.count;
        let (fastest, slowest, average, stddev) = if n > 0 {
            let mean = p.sum_ns as f64 / n as f64;
            let var = (p.sumsq_ns as f64 / n as f64 - mean * mean).max(0.0);
            (p.min_ns as f64 / NS, p.max_ns as f64 / NS, mean / NS, var.sqrt() / NS)
        } else {
            (0.0, 0.0, 0.0, 0.0)
        };
        let histogram = if n > 0 { buckets(&p.hist, p.min_ns, p.max_ns) } else { Vec::new() };
        let latency_distribution = if n > 0 {
            PERCENTILES
                .iter()
                .map(|&pct| Percentile {
                    percent: pct,
                    secs: percentile_ns(&p.hist, pct, p.min_ns, p.max_ns) as f64 / NS,
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut error_distribution: Vec<ErrorCount> =
            p.errors.into_iter().map(|(error, count)| ErrorCount { count, error }).collect();
        error_distribution.sort_by(|a, b| b.count.cmp(&a.count).then(a.error.cmp(&b.error)));
        let errors = error_distribution.iter().map(|e| e.count).sum();
        let samples = sample.then(|| time_series(p.seconds));
        Stats {
            name,
            total_secs,
            requests: n,
            errors,
            slowest_secs: slowest,
            fastest_secs: fastest,
            average_secs: average,
            stddev_secs: stddev,
            requests_per_sec: if total_secs > 0.0 { n as f64 / total_secs } else { 0.0 },
            histogram,
            latency_distribution,
            error_distribution,
            samples,
        }
    }

    /// The latency at `percent` (one of [`PERCENTILES`]), in seconds.
    pub fn percentile(&self, percent: f64) -> Option<f64> {
        self.latency_distribution.iter().find(|p| (p.percent - percent).abs() < 1e-9).map(|p| p.secs)
    }

    /// The report exactly as etcd benchmark prints it (`%4.4f` numbers, or `%g` with
    /// `precise`): Summary, Response time histogram, Latency distribution, the `--sample` series,
    /// Error distribution. Empty when nothing completed.
    pub fn to_text(&self, precise: bool) -> String {
        let secs = |x: f64| format!("{} secs", num(x, precise));
        let mut s = String::new();
        if self.requests > 0 {
            s += "\nSummary:\n";
            s += &format!("  Total:\t{}.\n", secs(self.total_secs));
            s += &format!("  Slowest:\t{}.\n", secs(self.slowest_secs));
            s += &format!("  Fastest:\t{}.\n", secs(self.fastest_secs));
            s += &format!("  Average:\t{}.\n", secs(self.average_secs));
            s += &format!("  Stddev:\t{}.\n", secs(self.stddev_secs));
            s += &format!("  Requests/sec:\t{}\n", num(self.requests_per_sec, precise));
            s += "\nResponse time histogram:\n";
            let max = self.histogram.iter().map(|b| b.count).max().unwrap_or(0);
            for b in &self.histogram {
                let bar = (b.count * 40).checked_div(max).unwrap_or(0) as usize;
                s += &format!("  {} [{}]\t|{}\n", num(b.mark_secs, precise), b.count, "∎".repeat(bar));
            }
            s += "\nLatency distribution:\n";
            for p in &self.latency_distribution {
                if p.secs > 0.0 {
                    s += &format!("  {}% in {}.\n", go_g(p.percent), secs(p.secs));
                }
            }
            if let Some(samples) = &self.samples {
                s += "\nSample in one second (unix latency throughput):\n";
                s += "UNIX-SECOND,MIN-LATENCY-MS,AVG-LATENCY-MS,MAX-LATENCY-MS,AVG-THROUGHPUT\n";
                for p in samples {
                    s += &format!(
                        "{},{},{},{},{}\n",
                        p.unix_second,
                        go_duration(Duration::from_secs_f64(p.min_secs)),
                        go_duration(Duration::from_secs_f64(p.avg_secs)),
                        go_duration(Duration::from_secs_f64(p.max_secs)),
                        p.throughput
                    );
                }
                s += "\n";
            }
        }
        if !self.error_distribution.is_empty() {
            s += "\nError distribution:\n";
            for e in &self.error_distribution {
                s += &format!("  [{}]\t{}\n", e.count, e.error);
            }
        }
        s
    }
}

/// The 11 buckets of etcd's histogram: marks at fastest + i·(slowest − fastest)/10 for i < 10,
/// and slowest; each latency counts in the first bucket whose mark it does not exceed. Latencies
/// come from the HDR histogram (its median-equivalent values), with the buckets holding the
/// exact fastest and slowest pinned to them.
fn buckets(hist: &Histogram<u64>, min_ns: u64, max_ns: u64) -> Vec<Bucket> {
    let fastest = min_ns as f64 / NS;
    let slowest = max_ns as f64 / NS;
    let step = (slowest - fastest) / (HISTOGRAM_BUCKETS - 1) as f64;
    let marks: Vec<f64> = (0..HISTOGRAM_BUCKETS)
        .map(|i| if i == HISTOGRAM_BUCKETS - 1 { slowest } else { fastest + step * i as f64 })
        .collect();
    let mut counts = vec![0u64; HISTOGRAM_BUCKETS];
    for v in hist.iter_recorded() {
        let value = v.value_iterated_to();
        let ns = if hist.lowest_equivalent(value) <= min_ns {
            min_ns
        } else if hist.highest_equivalent(value) >= max_ns {
            max_ns
        } else {
            hist.median_equivalent(value).clamp(min_ns, max_ns)
        };
        let secs = ns as f64 / NS;
        let idx = marks.iter().position(|m| secs <= *m).unwrap_or(HISTOGRAM_BUCKETS - 1);
        counts[idx] += v.count_at_value();
    }
    marks.into_iter().zip(counts).map(|(mark_secs, count)| Bucket { mark_secs, count }).collect()
}

/// etcd's percentile: in the sorted latencies, the value at the first index `i` with
/// `i·100/n ≥ pct`, i.e. the `(i + 1)`-th smallest; 0 (a line etcd leaves out) when that index is
/// past the end, as for 99.9 % of fewer than 1000 requests.
fn percentile_ns(hist: &Histogram<u64>, pct: f64, min_ns: u64, max_ns: u64) -> u64 {
    let n = hist.len();
    if n == 0 {
        return 0;
    }
    let mut i = ((pct * n as f64 / 100.0).floor() as u64).saturating_sub(1);
    while (i as f64) * 100.0 / (n as f64) < pct {
        i += 1;
    }
    let rank = i + 1;
    if rank > n {
        return 0;
    }
    if rank == n {
        return max_ns;
    }
    if rank == 1 {
        return min_ns;
    }
    let value = hist.value_at_quantile((rank as f64 - 0.5) / n as f64);
    hist.median_equivalent(value).clamp(min_ns, max_ns)
}

/// etcd's `--sample` series: every second from the first to the last, empty ones filled in.
fn time_series(seconds: BTreeMap<u64, SecondPoint>) -> Vec<Sample> {
    let (Some(first), Some(last)) = (seconds.keys().next().copied(), seconds.keys().next_back().copied())
    else {
        return Vec::new();
    };
    (first..=last)
        .map(|sec| {
            let p = seconds.get(&sec).copied().unwrap_or(SecondPoint { min_ns: 0, ..SecondPoint::default() });
            Sample {
                unix_second: sec,
                min_secs: p.min_ns as f64 / NS,
                avg_secs: if p.count > 0 { (p.total_ns / p.count as u128) as f64 / NS } else { 0.0 },
                max_secs: p.max_ns as f64 / NS,
                throughput: p.count,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn recorder_with(lats_ms: &[u64]) -> Recorder {
        let r = Recorder::new("put", 4, false);
        let t = Instant::now();
        for (i, &l) in lats_ms.iter().enumerate() {
            r.ok(i, t, t + ms(l));
        }
        r
    }

    #[test]
    fn summary_is_exact() {
        let r = recorder_with(&[1, 2, 3, 4]);
        let s = r.stats(Duration::from_secs(2));
        assert_eq!(s.requests, 4);
        assert!((s.fastest_secs - 0.001).abs() < 1e-12);
        assert!((s.slowest_secs - 0.004).abs() < 1e-12);
        assert!((s.average_secs - 0.0025).abs() < 1e-12);
        // population stddev of 1,2,3,4 ms = sqrt(1.25) ms
        assert!((s.stddev_secs - 1.25f64.sqrt() / 1000.0).abs() < 1e-9);
        assert!((s.requests_per_sec - 2.0).abs() < 1e-12);
    }

    #[test]
    fn histogram_has_eleven_buckets_like_etcd() {
        // 1..=100 ms: etcd's buckets are 1, 10.9, 20.8, ... 90.1, 100 ms.
        let lats: Vec<u64> = (1..=100).collect();
        let s = recorder_with(&lats).stats(Duration::from_secs(1));
        assert_eq!(s.histogram.len(), HISTOGRAM_BUCKETS);
        let counts: Vec<u64> = s.histogram.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![1, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10]);
        assert_eq!(counts.iter().sum::<u64>(), 100);
        assert!((s.histogram[0].mark_secs - 0.001).abs() < 1e-12);
        assert!((s.histogram[10].mark_secs - 0.1).abs() < 1e-12);
    }

    #[test]
    fn percentiles_follow_etcd() {
        // etcd over 1..=100 ms: first i with i*100/n >= p, value nums[i] = (i+1) ms.
        let lats: Vec<u64> = (1..=100).collect();
        let s = recorder_with(&lats).stats(Duration::from_secs(1));
        let expect = [11.0, 26.0, 51.0, 76.0, 91.0, 96.0, 100.0, 0.0];
        for (p, want) in s.latency_distribution.iter().zip(expect) {
            let got = p.secs * 1000.0;
            assert!((got - want).abs() <= want * 0.002, "p{} = {got} ms, want {want} ms", p.percent);
        }
        assert!(s.percentile(99.0).is_some());
    }

    #[test]
    fn text_matches_etcd_layout() {
        let r = recorder_with(&[1, 1, 1, 2]);
        r.err(0, "rpc error: code = Unavailable desc = boom");
        r.err(1, "rpc error: code = Unavailable desc = boom");
        let text = r.stats(Duration::from_secs(1)).to_text(false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "");
        assert_eq!(lines[1], "Summary:");
        assert_eq!(lines[2], "  Total:\t1.0000 secs.");
        assert_eq!(lines[3], "  Slowest:\t0.0020 secs.");
        assert_eq!(lines[4], "  Fastest:\t0.0010 secs.");
        assert_eq!(lines[5], "  Average:\t0.0013 secs.");
        assert_eq!(lines[6], "  Stddev:\t0.0004 secs.");
        assert_eq!(lines[7], "  Requests/sec:\t4.0000");
        assert_eq!(lines[9], "Response time histogram:");
        assert_eq!(lines[10], format!("  0.0010 [3]\t|{}", "∎".repeat(40)));
        assert_eq!(lines[20], format!("  0.0020 [1]\t|{}", "∎".repeat(13)));
        assert_eq!(lines[22], "Latency distribution:");
        // n = 4: etcd prints 10, 25, 50 and 75 % (the others fall past the end).
        assert_eq!(lines[23], "  10% in 0.0010 secs.");
        assert_eq!(lines[26], "  75% in 0.0020 secs.");
        assert_eq!(lines[27], "");
        assert_eq!(lines[28], "Error distribution:");
        assert_eq!(lines[29], "  [2]\trpc error: code = Unavailable desc = boom");
        assert_eq!(lines.len(), 30);
    }

    #[test]
    fn only_errors_prints_error_distribution() {
        let r = Recorder::new("range", 1, false);
        r.err(0, "connection refused");
        let s = r.stats(Duration::from_secs(1));
        assert_eq!(s.requests, 0);
        assert_eq!(s.errors, 1);
        assert_eq!(s.to_text(false), "\nError distribution:\n  [1]\tconnection refused\n");
        assert_eq!(r.completed(), 1);
        assert_eq!(r.succeeded(), 0);
    }

    #[test]
    fn precise_uses_go_g() {
        let text = recorder_with(&[1, 3]).stats(Duration::from_millis(1500)).to_text(true);
        assert!(text.contains("  Total:\t1.5 secs.\n"), "{text}");
        assert!(text.contains("  Fastest:\t0.001 secs.\n"), "{text}");
        assert!(text.contains("  Requests/sec:\t1.3333333333333333\n"), "{text}");
    }

    #[test]
    fn samples_fill_empty_seconds() {
        let r = Recorder::new("put", 1, true);
        let t = r.base;
        r.ok(0, t, t + ms(2));
        let later = t + Duration::from_millis(2500);
        r.ok(0, later, later + ms(4));
        let s = r.stats(Duration::from_secs(3));
        let samples = s.samples.clone().expect("sampled");
        assert!(samples.len() >= 3);
        assert_eq!(samples.iter().map(|p| p.throughput).sum::<u64>(), 2);
        assert!(samples.iter().any(|p| p.throughput == 0));
        let text = s.to_text(false);
        assert!(
            text.contains("\nSample in one second (unix latency throughput):\nUNIX-SECOND,MIN-LATENCY-MS")
        );
        assert!(text.contains(",2ms,2ms,2ms,1\n"), "{text}");
        assert!(text.contains(",0s,0s,0s,0\n"), "{text}");
    }

    #[test]
    fn json_has_the_figures() {
        let s = recorder_with(&[1, 2]).stats(Duration::from_secs(1));
        let v = serde_json::to_value(&s).expect("serializes");
        assert_eq!(v["name"], "put");
        assert_eq!(v["requests"], 2);
        assert_eq!(v["histogram"].as_array().map(Vec::len), Some(11));
        assert_eq!(v["latency_distribution"].as_array().map(Vec::len), Some(8));
        assert!(v.get("samples").is_none());
    }

    #[test]
    fn shards_merge_across_clients() {
        let r = Recorder::new("put", 100, false);
        let t = Instant::now();
        for c in 0..100 {
            r.ok(c, t, t + ms(1 + c as u64));
        }
        let s = r.stats(Duration::from_secs(1));
        assert_eq!(s.requests, 100);
        assert!((s.slowest_secs - 0.1).abs() < 1e-12);
        assert_eq!(s.histogram.iter().map(|b| b.count).sum::<u64>(), 100);
    }
}
