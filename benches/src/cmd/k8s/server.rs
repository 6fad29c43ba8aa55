//! The server's own figures, read from /proc when it runs on this machine (`--server-pid`):
//! resident memory sampled through the load (start, peak, end) and CPU time over it, next to
//! the client's, so that a figure says which side was busy.

use actcd_test_support::procfs::{cpu_times, memory, CpuTimes, Proc};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How often RSS is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The server's use over the load.
#[derive(Debug, Clone, Serialize)]
pub struct ServerUsage {
    /// The pid read.
    pub pid: u32,
    /// RSS when the load started, MiB.
    pub rss_start_mib: f64,
    /// Highest RSS sampled, MiB.
    pub rss_peak_mib: f64,
    /// RSS when the load ended, MiB.
    pub rss_end_mib: f64,
    /// CPU seconds (user + system) over the load.
    pub cpu_secs: f64,
    /// cpu_secs / wall seconds: cores kept busy on average.
    pub cores_used: f64,
}

impl ServerUsage {
    /// The text shown after the report.
    pub fn to_text(&self) -> String {
        format!(
            "\nServer (pid {}):\n  RSS:\t{:.0} MiB at start, {:.0} MiB peak, {:.0} MiB at end.\n  CPU:\t{:.2} secs, {:.2} cores.\n",
            self.pid, self.rss_start_mib, self.rss_peak_mib, self.rss_end_mib, self.cpu_secs, self.cores_used
        )
    }
}

fn rss_mib(pid: u32) -> Option<f64> {
    memory(Proc::Pid(pid)).ok().map(|m| m.rss_kb as f64 / 1024.0)
}

/// Sampling of one server process, from its start to [`Sampler::finish`].
pub struct Sampler {
    pid: u32,
    started: Instant,
    cpu: CpuTimes,
    rss_start: f64,
    peak: Arc<Mutex<f64>>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `pid`; the error says why it cannot be read.
    pub fn start(pid: u32) -> Result<Self, String> {
        let rss_start = memory(Proc::Pid(pid))?.rss_kb as f64 / 1024.0;
        let cpu = cpu_times(Proc::Pid(pid)).ok_or_else(|| format!("cannot read /proc/{pid}/stat"))?;
        let peak = Arc::new(Mutex::new(rss_start));
        let task = {
            let peak = peak.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    tick.tick().await;
                    let Some(now) = rss_mib(pid) else { return };
                    let mut p = peak.lock().unwrap_or_else(|p| p.into_inner());
                    *p = p.max(now);
                }
            })
        };
        Ok(Self { pid, started: Instant::now(), cpu, rss_start, peak, task })
    }

    /// Stops sampling; `None` when the process is gone.
    pub fn finish(self) -> Option<ServerUsage> {
        self.task.abort();
        let wall = self.started.elapsed().as_secs_f64();
        let used = cpu_times(Proc::Pid(self.pid))?.since(self.cpu);
        let rss_end = rss_mib(self.pid)?;
        let peak = self.peak.lock().unwrap_or_else(|p| p.into_inner()).max(rss_end);
        let cpu_secs = used.user + used.sys;
        Some(ServerUsage {
            pid: self.pid,
            rss_start_mib: self.rss_start,
            rss_peak_mib: peak,
            rss_end_mib: rss_end,
            cpu_secs,
            cores_used: if wall > 0.0 { cpu_secs / wall } else { 0.0 },
        })
    }
}
