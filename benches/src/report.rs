//! Latency recording and the report.
//!
//! A [`Recorder`] takes results from every client task of a report: latencies go into an HDR
//! histogram (nanoseconds, 3 significant digits) next to exact count, sum, sum of squares, min
//! and max (etcd's Summary figures are exact). One mutex serves: the clients share one thread
//! (`execute`), so it is never contended. [`Recorder::stats`] makes the [`Stats`], which print
//! in etcd benchmark's text format ([`Stats::to_text`]) or serialize as JSON.

use crate::format::{go_g, num};
use actcd_proto::go_duration::format as go_duration;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The percentiles of etcd's "Latency distribution".
pub const PERCENTILES: [f64; 8] = [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// Buckets of etcd's "Response time histogram" (fastest, 9 steps, slowest).
pub const HISTOGRAM_BUCKETS: usize = 11;

/// The longest latency the histogram holds exactly (an hour); longer ones are recorded as this.
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

const NS: f64 = 1e9;

/// One second of `--sample`'s time series: min, max, total and count of its latencies.
#[derive(Debug, Clone, Copy, Default)]
struct Second(u64, u64, u128, u64);

struct Tally {
    hist: Histogram<u64>,
    count: u64,
    failed: u64,
    sum_ns: u128,
    sumsq_ns: u128,
    min_ns: u64,
    max_ns: u64,
    errors: HashMap<String, u64>,
    seconds: BTreeMap<u64, Second>,
}

/// Collects the results of one kind of request (one report).
pub struct Recorder {
    name: String,
    tally: Mutex<Tally>,
    base: Instant,
    base_unix: Duration,
    sample: bool,
}

impl Recorder {
    /// A recorder; `sample` keeps the per-second time series.
    pub fn new(name: impl Into<String>, sample: bool) -> Self {
        let hist = Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).expect("hdrhistogram takes these bounds");
        let tally = Tally {
            hist,
            count: 0,
            failed: 0,
            sum_ns: 0,
            sumsq_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            errors: HashMap::new(),
            seconds: BTreeMap::new(),
        };
        Self {
            name: name.into(),
            tally: Mutex::new(tally),
            base: Instant::now(),
            base_unix: SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default(),
            sample,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn tally(&self) -> MutexGuard<'_, Tally> {
        // A poisoned lock only means a client panicked mid-record; the figures still add up.
        self.tally.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a success that started (or was meant to start) at `start` and ended at `end`.
    pub fn ok(&self, start: Instant, end: Instant) {
        let ns = u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX);
        let ns = ns.clamp(1, MAX_TRACKED_NS);
        let mut t = self.tally();
        t.hist.saturating_record(ns);
        t.count += 1;
        t.sum_ns += ns as u128;
        t.sumsq_ns += (ns as u128) * (ns as u128);
        t.min_ns = t.min_ns.min(ns);
        t.max_ns = t.max_ns.max(ns);
        if self.sample {
            let unix = (self.base_unix + start.saturating_duration_since(self.base)).as_secs();
            let s = t.seconds.entry(unix).or_insert(Second(u64::MAX, 0, 0, 0));
            *s = Second(s.0.min(ns), s.1.max(ns), s.2 + ns as u128, s.3 + 1);
        }
    }

    /// Records a failure; its text is the key of the error distribution.
    pub fn err(&self, error: &str) {
        let mut t = self.tally();
        t.failed += 1;
        *t.errors.entry(error.to_string()).or_default() += 1;
    }

    /// Records the `result` of a request sent at `start`, and passes it on.
    pub fn record<T, E: std::fmt::Display>(&self, start: Instant, result: Result<T, E>) -> Result<T, E> {
        match &result {
            Ok(_) => self.ok(start, Instant::now()),
            Err(e) => self.err(&e.to_string()),
        }
        result
    }

    /// Results recorded so far, successes and failures.
    pub fn completed(&self) -> u64 {
        let t = self.tally();
        t.count + t.failed
    }

    pub fn succeeded(&self) -> u64 {
        self.tally().count
    }

    /// The report's figures; `total` is the run's wall time.
    pub fn stats(&self, total: Duration) -> Stats {
        let t = self.tally();
        let (n, total_secs) = (t.count, total.as_secs_f64());
        let mut stats = Stats {
            name: self.name.clone(),
            total_secs,
            requests: n,
            errors: t.failed,
            slowest_secs: 0.0,
            fastest_secs: 0.0,
            average_secs: 0.0,
            stddev_secs: 0.0,
            requests_per_sec: if total_secs > 0.0 { n as f64 / total_secs } else { 0.0 },
            histogram: Vec::new(),
            latency_distribution: Vec::new(),
            error_distribution: t
                .errors
                .iter()
                .map(|(e, &count)| ErrorCount { count, error: e.clone() })
                .collect(),
            samples: self.sample.then(|| time_series(&t.seconds)),
        };
        stats.error_distribution.sort_by(|a, b| b.count.cmp(&a.count).then(a.error.cmp(&b.error)));
        if n > 0 {
            let mean = t.sum_ns as f64 / n as f64;
            stats.fastest_secs = t.min_ns as f64 / NS;
            stats.slowest_secs = t.max_ns as f64 / NS;
            stats.average_secs = mean / NS;
            stats.stddev_secs = (t.sumsq_ns as f64 / n as f64 - mean * mean).max(0.0).sqrt() / NS;
            stats.histogram = buckets(&t.hist, t.min_ns, t.max_ns);
            stats.latency_distribution = PERCENTILES
                .iter()
                .map(|&percent| Percentile {
                    percent,
                    secs: percentile_ns(&t.hist, percent, t.min_ns, t.max_ns) as f64 / NS,
                })
                .collect();
        }
        stats
    }
}

/// One bar of the response time histogram: latencies above the previous mark up to this one.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Bucket {
    pub mark_secs: f64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Percentile {
    pub percent: f64,
    pub secs: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ErrorCount {
    pub count: u64,
    pub error: String,
}

/// One second of the `--sample` time series, latencies in seconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// The Unix second in which the requests started.
    pub unix_second: u64,
    pub min_secs: f64,
    pub avg_secs: f64,
    pub max_secs: f64,
    /// Successful requests started in that second.
    pub throughput: u64,
}

/// A finished report: etcd benchmark's figures, times in seconds.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub name: String,
    /// Wall time of the run.
    pub total_secs: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    pub slowest_secs: f64,
    pub fastest_secs: f64,
    pub average_secs: f64,
    /// Standard deviation of the latency (population).
    pub stddev_secs: f64,
    /// Successes per second of wall time.
    pub requests_per_sec: f64,
    /// 11 buckets from fastest to slowest.
    pub histogram: Vec<Bucket>,
    /// 10 % to 99.9 %.
    pub latency_distribution: Vec<Percentile>,
    /// Errors by text, most frequent first.
    pub error_distribution: Vec<ErrorCount>,
    /// The per-second time series, with `--sample`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<Sample>>,
}

impl Stats {
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
            for (what, x) in [
                ("Total", self.total_secs),
                ("Slowest", self.slowest_secs),
                ("Fastest", self.fastest_secs),
                ("Average", self.average_secs),
                ("Stddev", self.stddev_secs),
            ] {
                s += &format!("  {what}:\t{}.\n", secs(x));
            }
            s += &format!("  Requests/sec:\t{}\n", num(self.requests_per_sec, precise));
            s += "\nResponse time histogram:\n";
            let max = self.histogram.iter().map(|b| b.count).max().unwrap_or(0);
            for b in &self.histogram {
                let bar = (b.count * 40).checked_div(max).unwrap_or(0) as usize;
                s += &format!("  {} [{}]\t|{}\n", num(b.mark_secs, precise), b.count, "∎".repeat(bar));
            }
            s += "\nLatency distribution:\n";
            for p in self.latency_distribution.iter().filter(|p| p.secs > 0.0) {
                s += &format!("  {}% in {}.\n", go_g(p.percent), secs(p.secs));
            }
            if let Some(samples) = &self.samples {
                s += "\nSample in one second (unix latency throughput):\n";
                s += "UNIX-SECOND,MIN-LATENCY-MS,AVG-LATENCY-MS,MAX-LATENCY-MS,AVG-THROUGHPUT\n";
                let d = |x: f64| go_duration(Duration::from_secs_f64(x));
                for p in samples {
                    s += &format!(
                        "{},{},{},{},{}\n",
                        p.unix_second,
                        d(p.min_secs),
                        d(p.avg_secs),
                        d(p.max_secs),
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
    let (fastest, slowest) = (min_ns as f64 / NS, max_ns as f64 / NS);
    let step = (slowest - fastest) / (HISTOGRAM_BUCKETS - 1) as f64;
    let marks: Vec<f64> = (0..HISTOGRAM_BUCKETS)
        .map(|i| if i == HISTOGRAM_BUCKETS - 1 { slowest } else { fastest + step * i as f64 })
        .collect();
    let mut counts = [0u64; HISTOGRAM_BUCKETS];
    for v in hist.iter_recorded() {
        let value = v.value_iterated_to();
        let ns = if hist.lowest_equivalent(value) <= min_ns {
            min_ns
        } else if hist.highest_equivalent(value) >= max_ns {
            max_ns
        } else {
            hist.median_equivalent(value).clamp(min_ns, max_ns)
        };
        let idx = marks.iter().position(|m| ns as f64 / NS <= *m).unwrap_or(HISTOGRAM_BUCKETS - 1);
        counts[idx] += v.count_at_value();
    }
    marks.into_iter().zip(counts).map(|(mark_secs, count)| Bucket { mark_secs, count }).collect()
}

/// etcd's percentile: in the sorted latencies, the value at the first index `i` with
/// `i·100/n ≥ pct`, i.e. the `(i + 1)`-th smallest; 0 (a line etcd leaves out) when that index is
/// past the end, as for 99.9 % of fewer than 1000 requests.
fn percentile_ns(hist: &Histogram<u64>, pct: f64, min_ns: u64, max_ns: u64) -> u64 {
    let n = hist.len();
    let mut i = ((pct * n as f64 / 100.0).floor() as u64).saturating_sub(1);
    while (i as f64) * 100.0 / (n as f64) < pct {
        i += 1;
    }
    match i + 1 {
        rank if rank > n => 0,
        rank if rank == n => max_ns,
        1 => min_ns,
        rank => hist
            .median_equivalent(hist.value_at_quantile((rank as f64 - 0.5) / n as f64))
            .clamp(min_ns, max_ns),
    }
}

/// etcd's `--sample` series: every second from the first to the last, empty ones filled in.
fn time_series(seconds: &BTreeMap<u64, Second>) -> Vec<Sample> {
    let (Some(&first), Some(&last)) = (seconds.keys().next(), seconds.keys().next_back()) else {
        return Vec::new();
    };
    (first..=last)
        .map(|sec| {
            let Second(min, max, total, count) = seconds.get(&sec).copied().unwrap_or_default();
            Sample {
                unix_second: sec,
                min_secs: min as f64 / NS,
                avg_secs: if count > 0 { (total / count as u128) as f64 / NS } else { 0.0 },
                max_secs: max as f64 / NS,
                throughput: count,
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
        let (r, t) = (Recorder::new("put", false), Instant::now());
        for &l in lats_ms {
            r.ok(t, t + ms(l));
        }
        r
    }

    #[test]
    fn summary_is_exact() {
        let s = recorder_with(&[1, 2, 3, 4]).stats(Duration::from_secs(2));
        assert_eq!(s.requests, 4);
        assert!((s.fastest_secs - 0.001).abs() < 1e-12);
        assert!((s.slowest_secs - 0.004).abs() < 1e-12);
        assert!((s.average_secs - 0.0025).abs() < 1e-12);
        // population stddev of 1,2,3,4 ms = sqrt(1.25) ms
        assert!((s.stddev_secs - 1.25f64.sqrt() / 1000.0).abs() < 1e-9);
        assert!((s.requests_per_sec - 2.0).abs() < 1e-12);
    }

    #[test]
    fn histogram_and_percentiles_follow_etcd() {
        // 1..=100 ms: etcd's buckets are 1, 10.9, 20.8, ... 90.1, 100 ms.
        let lats: Vec<u64> = (1..=100).collect();
        let s = recorder_with(&lats).stats(Duration::from_secs(1));
        let counts: Vec<u64> = s.histogram.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![1, 9, 10, 10, 10, 10, 10, 10, 10, 10, 10]);
        assert!((s.histogram[0].mark_secs - 0.001).abs() < 1e-12);
        assert!((s.histogram[10].mark_secs - 0.1).abs() < 1e-12);
        // etcd's percentile: first i with i*100/n >= p, value nums[i] = (i+1) ms.
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
        r.err("rpc error: code = Unavailable desc = boom");
        r.err("rpc error: code = Unavailable desc = boom");
        let text = r.stats(Duration::from_secs(1)).to_text(false);
        let lines: Vec<&str> = text.lines().collect();
        let expect = [
            (0, ""),
            (1, "Summary:"),
            (2, "  Total:\t1.0000 secs."),
            (3, "  Slowest:\t0.0020 secs."),
            (4, "  Fastest:\t0.0010 secs."),
            (5, "  Average:\t0.0013 secs."),
            (6, "  Stddev:\t0.0004 secs."),
            (7, "  Requests/sec:\t4.0000"),
            (9, "Response time histogram:"),
            (22, "Latency distribution:"),
            // n = 4: etcd prints 10, 25, 50 and 75 % (the others fall past the end).
            (23, "  10% in 0.0010 secs."),
            (26, "  75% in 0.0020 secs."),
            (27, ""),
            (28, "Error distribution:"),
            (29, "  [2]\trpc error: code = Unavailable desc = boom"),
        ];
        for (i, line) in expect {
            assert_eq!(lines[i], line, "line {i}");
        }
        assert_eq!(lines[10], format!("  0.0010 [3]\t|{}", "∎".repeat(40)));
        assert_eq!(lines[20], format!("  0.0020 [1]\t|{}", "∎".repeat(13)));
        assert_eq!(lines.len(), 30);
    }

    #[test]
    fn only_errors_prints_error_distribution() {
        let r = Recorder::new("range", false);
        r.err("connection refused");
        let s = r.stats(Duration::from_secs(1));
        assert_eq!((s.requests, s.errors, r.completed(), r.succeeded()), (0, 1, 1, 0));
        assert_eq!(s.to_text(false), "\nError distribution:\n  [1]\tconnection refused\n");
    }

    #[test]
    fn precise_uses_go_g() {
        let text = recorder_with(&[1, 3]).stats(Duration::from_millis(1500)).to_text(true);
        for line in
            ["  Total:\t1.5 secs.\n", "  Fastest:\t0.001 secs.\n", "  Requests/sec:\t1.3333333333333333\n"]
        {
            assert!(text.contains(line), "{text}");
        }
    }

    #[test]
    fn samples_fill_empty_seconds() {
        let r = Recorder::new("put", true);
        let t = r.base;
        r.ok(t, t + ms(2));
        let later = t + Duration::from_millis(2500);
        r.ok(later, later + ms(4));
        let s = r.stats(Duration::from_secs(3));
        let samples = s.samples.clone().expect("sampled");
        assert!(samples.len() >= 3);
        assert_eq!(samples.iter().map(|p| p.throughput).sum::<u64>(), 2);
        let text = s.to_text(false);
        assert!(
            text.contains("\nSample in one second (unix latency throughput):\nUNIX-SECOND,MIN-LATENCY-MS")
        );
        assert!(text.contains(",2ms,2ms,2ms,1\n"), "{text}");
        assert!(text.contains(",0s,0s,0s,0\n"), "{text}");
    }

    #[test]
    fn json_has_the_figures() {
        let v =
            serde_json::to_value(recorder_with(&[1, 2]).stats(Duration::from_secs(1))).expect("serializes");
        assert_eq!((v["name"].as_str(), v["requests"].as_u64()), (Some("put"), Some(2)));
        assert_eq!(v["histogram"].as_array().map(Vec::len), Some(11));
        assert_eq!(v["latency_distribution"].as_array().map(Vec::len), Some(8));
        assert!(v.get("samples").is_none());
    }
}
