//! The client's own CPU use (user and system seconds), read from `/proc/self/stat`, so that a
//! report shows whether the client, sharing the machine with the server, was the bottleneck.

use actcd_test_support::procfs::{cpu_times, CpuTimes, Proc};
use serde::Serialize;
use std::time::Duration;

/// This process's CPU time so far, `None` where `/proc` is missing.
pub fn now() -> Option<CpuTimes> {
    cpu_times(Proc::Me)
}

/// The client's CPU use over a run, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientCpu {
    /// User seconds.
    pub user_secs: f64,
    /// System seconds.
    pub sys_secs: f64,
    /// Wall-clock seconds of the measured span.
    pub wall_secs: f64,
    /// CPU cores on the machine.
    pub cores: usize,
    /// (user + sys) / wall: how many cores the client kept busy on average.
    pub cores_used: f64,
}

impl ClientCpu {
    /// The use between `start` and now over `wall`; `None` where `/proc` is missing.
    pub fn measure(start: Option<CpuTimes>, wall: Duration) -> Option<Self> {
        let used = now()?.since(start?);
        let wall_secs = wall.as_secs_f64();
        Some(Self {
            user_secs: used.user,
            sys_secs: used.sys,
            wall_secs,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cores_used: if wall_secs > 0.0 { (used.user + used.sys) / wall_secs } else { 0.0 },
        })
    }

    /// The text shown after the report.
    pub fn to_text(&self) -> String {
        format!(
            "\nClient CPU:\n  User:\t{:.2} secs.\n  System:\t{:.2} secs.\n  Busy:\t{:.2} of {} cores over {:.2} secs.\n",
            self.user_secs, self.sys_secs, self.cores_used, self.cores, self.wall_secs
        )
    }
}
