//! The client's own CPU use (user and system seconds), read from `/proc/self/stat`, so that a
//! report shows whether the client, sharing the machine with the server, was the bottleneck.

use serde::Serialize;
use std::time::Duration;

/// Linux reports `utime` and `stime` in USER_HZ ticks, which is 100 on every architecture's
/// user-space ABI.
const USER_HZ: f64 = 100.0;

/// CPU time used by this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Seconds in user mode.
    pub user: f64,
    /// Seconds in the kernel on the process's behalf.
    pub sys: f64,
}

impl CpuTimes {
    /// Reads this process's times, or `None` where `/proc` is missing.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        parse_stat(&stat)
    }

    /// The time used since `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self { user: (self.user - earlier.user).max(0.0), sys: (self.sys - earlier.sys).max(0.0) }
    }
}

/// Parses the `utime` and `stime` fields (14 and 15) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces, so fields are counted after its last `)`.
pub fn parse_stat(stat: &str) -> Option<CpuTimes> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    // `after` starts at field 3 (state): utime is field 14, the 12th here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(CpuTimes { user: utime as f64 / USER_HZ, sys: stime as f64 / USER_HZ })
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
        let used = CpuTimes::now()?.since(start?);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_name() {
        let line = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 \
                    12345 1000000 500 18446744073709551615";
        let t = parse_stat(line).expect("parses");
        assert!((t.user - 2.5).abs() < 1e-9);
        assert!((t.sys - 0.75).abs() < 1e-9);
    }

    #[test]
    fn reads_own_stat() {
        let t = CpuTimes::now().expect("/proc/self/stat is readable on Linux");
        assert!(t.user >= 0.0 && t.sys >= 0.0);
        assert!(parse_stat("garbage").is_none());
    }
}
