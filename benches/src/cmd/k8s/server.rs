//! The server's own figures, read from /proc when it runs on this machine (`--server-pid`):
//! resident memory sampled through the load (start, peak, end) and CPU time over it, next to
//! the client's, so that a figure says which side was busy.

use actcd_test_support::procfs::{cpu_times, memory, CpuTimes, Proc};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The server's use over the load: RSS in MiB, CPU seconds (user + system) and cores kept busy
/// on average.
#[derive(Debug, Clone, Serialize)]
pub struct ServerUsage {
    pub pid: u32,
    pub rss_start_mib: f64,
    pub rss_peak_mib: f64,
    pub rss_end_mib: f64,
    pub cpu_secs: f64,
    pub cores_used: f64,
}

fn rss_mib(pid: u32) -> Result<f64, String> {
    memory(Proc::Pid(pid)).map(|m| m.rss_kb as f64 / 1024.0)
}

/// Sampling of one server process (every 250 ms), from its start to [`Sampler::finish`].
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
        let rss_start = rss_mib(pid)?;
        let cpu = cpu_times(Proc::Pid(pid)).ok_or_else(|| format!("cannot read /proc/{pid}/stat"))?;
        let peak = Arc::new(Mutex::new(rss_start));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            while let (_, Ok(now)) = (tick.tick().await, rss_mib(pid)) {
                let mut peak = p.lock().unwrap_or_else(|p| p.into_inner());
                *peak = peak.max(now);
            }
        });
        Ok(Self { pid, started: Instant::now(), cpu, rss_start, peak, task })
    }

    /// Stops sampling; `None` when the process is gone.
    pub fn finish(self) -> Option<ServerUsage> {
        self.task.abort();
        let wall = self.started.elapsed().as_secs_f64();
        let used = cpu_times(Proc::Pid(self.pid))?.since(self.cpu);
        let rss_end = rss_mib(self.pid).ok()?;
        let cpu_secs = used.user + used.sys;
        Some(ServerUsage {
            pid: self.pid,
            rss_start_mib: self.rss_start,
            rss_peak_mib: self.peak.lock().unwrap_or_else(|p| p.into_inner()).max(rss_end),
            rss_end_mib: rss_end,
            cpu_secs,
            cores_used: if wall > 0.0 { cpu_secs / wall } else { 0.0 },
        })
    }
}
