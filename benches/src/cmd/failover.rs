//! `failover`: how long writes stop when a member dies. One client puts one key after another
//! for `--duration`, each put bounded by `--request-timeout`, while something outside (a
//! script, a test) kills or stops a member. The figure is the longest stretch between two
//! acknowledged puts: for a leader killed with `kill -9`, failure detection plus the election
//! plus the first commit of the new term, which is what an etcd operator means by "writes were
//! down for". A failed put moves the client to its next connection, as clientv3 moves to its
//! next endpoint, so the endpoints may name every member, the dead one too.

use crate::conn::{bounded, channel_for, connect, kv_client};
use crate::output::Out;
use crate::report::Recorder;
use crate::settings::Settings;
use crate::stop::Stop;
use actcd_proto::etcdserverpb::PutRequest;
use actcd_proto::go_duration::parse as parse_go_duration;
use bytes::Bytes;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Args)]
pub struct FailoverArgs {
    /// How long to write.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub duration: Duration,
    /// Value size of each put.
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
}

/// What the run saw, in the JSON's `extra.failover` and as text; times in ms after the start.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Gaps {
    pub acknowledged: u64,
    /// Puts that failed or ran out of time.
    pub failed: u64,
    /// The longest stretch with no acknowledgement: between two acknowledgements, or from the
    /// last one to the end of the run when the writes never came back.
    pub longest_gap_ms: f64,
    pub gap_from_ms: f64,
    pub gap_to_ms: f64,
    /// Whether a put was acknowledged after the longest stretch (false: still down at the end).
    pub recovered: bool,
    /// Each failure's text, counted: which of etcd's errors a client saw while it waited.
    pub errors: BTreeMap<String, u64>,
}

impl Gaps {
    /// Notes an acknowledgement at `at` (time since the start); `last` is the one before.
    fn acked(&mut self, last: Option<Duration>, at: Duration) {
        self.acknowledged += 1;
        if let Some(last) = last {
            self.stretch(last, at, true);
        }
    }

    fn stretch(&mut self, from: Duration, to: Duration, recovered: bool) {
        let ms = |d: Duration| d.as_micros() as f64 / 1000.0;
        if ms(to - from) > self.longest_gap_ms {
            (self.longest_gap_ms, self.gap_from_ms, self.gap_to_ms) = (ms(to - from), ms(from), ms(to));
            self.recovered = recovered;
        }
    }

    fn failed(&mut self, text: String) {
        self.failed += 1;
        *self.errors.entry(text).or_default() += 1;
    }

    fn to_text(&self) -> String {
        let mut text = format!(
            "Failover:\n  acknowledged: {}\n  failed: {}\n  longest gap: {:.1} ms ({:.1} ms to {:.1} ms after the start{})\n",
            self.acknowledged,
            self.failed,
            self.longest_gap_ms,
            self.gap_from_ms,
            self.gap_to_ms,
            if self.recovered { "" } else { ", not recovered" }
        );
        for (error, count) in &self.errors {
            text += &format!("  {count} × {error}\n");
        }
        text
    }
}

impl FailoverArgs {
    pub fn validate(&self) -> Result<(), String> {
        Ok(())
    }

    pub async fn run(self, settings: &Settings, stop: &Stop, out: &Out) {
        let Some(channels) = connect(settings, stop, out, &["failover"]).await else { return };
        let rec = Recorder::new("failover", settings.sample);
        let put = PutRequest {
            key: Bytes::from_static(b"failover"),
            value: vec![b'v'; self.val_size].into(),
            ..Default::default()
        };
        let (mut gaps, mut last, mut conn) = (Gaps::default(), None, 0);
        let mut kv = kv_client(channel_for(&channels, conn));
        let started = Instant::now();
        while started.elapsed() < self.duration && !stop.is_stopped() {
            let sent = Instant::now();
            match rec.record(sent, bounded(settings.request_timeout, kv.put(put.clone())).await) {
                Ok(_) => {
                    let at = started.elapsed();
                    gaps.acked(last, at);
                    last = Some(at);
                }
                Err(e) => {
                    gaps.failed(e.text);
                    conn += 1;
                    kv = kv_client(channel_for(&channels, conn));
                    // A refused connection fails at once: a short pause keeps the loop from
                    // spinning on it, far below the gaps it measures.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        let end = started.elapsed();
        if let Some(last) = last {
            gaps.stretch(last, end, false);
        }
        out.report("", rec.stats(end), "");
        if out.json() {
            out.extra("failover", &gaps);
        } else {
            out.print(&gaps.to_text());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_stretch_between_acknowledgements_wins_and_an_open_end_counts() {
        let ms = Duration::from_millis;
        let mut gaps = Gaps::default();
        gaps.acked(None, ms(10));
        gaps.acked(Some(ms(10)), ms(20));
        gaps.failed("etcdserver: leader changed".into());
        gaps.failed("etcdserver: leader changed".into());
        gaps.acked(Some(ms(20)), ms(1220));
        gaps.acked(Some(ms(1220)), ms(1230));
        assert_eq!((gaps.acknowledged, gaps.failed), (4, 2));
        assert_eq!((gaps.gap_from_ms, gaps.gap_to_ms, gaps.recovered), (20.0, 1220.0, true));
        assert_eq!(gaps.errors["etcdserver: leader changed"], 2);
        // Down from 1230 ms to the end at 3000 ms: longer, and not recovered.
        gaps.stretch(ms(1230), ms(3000), false);
        assert_eq!((gaps.longest_gap_ms, gaps.recovered), (1770.0, false));
        assert!(gaps.to_text().contains("not recovered"));
    }
}
