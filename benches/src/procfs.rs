//! What `/proc` tells about a process and the machine: resident memory (VmRSS, VmHWM), the
//! process name, the open-file limit and the memory available. The watch-memory table reads the
//! server's memory from outside, as etcd's benchmark does.

use std::path::PathBuf;

/// Which process: this one, or another by pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    /// This process (`/proc/self`).
    Me,
    /// Another process.
    Pid(u32),
}

impl Proc {
    fn path(self, file: &str) -> PathBuf {
        match self {
            Proc::Me => PathBuf::from(format!("/proc/self/{file}")),
            Proc::Pid(p) => PathBuf::from(format!("/proc/{p}/{file}")),
        }
    }
}

/// Resident memory of a process, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// VmRSS: resident now.
    pub rss_kb: u64,
    /// VmHWM: the peak resident.
    pub hwm_kb: u64,
}

/// Reads VmRSS and VmHWM of `proc`; the error says why (no such process, not readable).
pub fn memory(proc: Proc) -> Result<Memory, String> {
    let path = proc.path("status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_status(&text).ok_or_else(|| format!("{} has no VmRSS line", path.display()))
}

/// The VmRSS and VmHWM lines of a `/proc/PID/status` text.
pub fn parse_status(text: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    let rss_kb = field("VmRSS:")?;
    Some(Memory { rss_kb, hwm_kb: field("VmHWM:").unwrap_or(rss_kb) })
}

/// The process name (`/proc/PID/comm`), empty when unreadable.
pub fn name(proc: Proc) -> String {
    std::fs::read_to_string(proc.path("comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The soft open-file limit of `proc` (from `/proc/PID/limits`), `None` when unreadable or
/// unlimited.
pub fn open_file_limit(proc: Proc) -> Option<u64> {
    parse_open_files(&std::fs::read_to_string(proc.path("limits")).ok()?)
}

/// The soft limit of the `Max open files` line of a `/proc/PID/limits` text.
pub fn parse_open_files(text: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// `MemAvailable` of `/proc/meminfo`, bytes.
pub fn mem_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The `MemAvailable` line of a `/proc/meminfo` text, in bytes.
pub fn parse_mem_available(text: &str) -> Option<u64> {
    let rest = text.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024)
}

/// The machine in one line: cores, CPU model, RAM, OS and kernel (for a summary's header).
pub fn machine_line() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let meminfo = read("/proc/meminfo");
    let mem_kb: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let os_release = read("/etc/os-release");
    let os = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".to_string());
    let kernel = read("/proc/sys/kernel/osrelease");
    format!(
        "{cores} cores ({cpu}), {:.0} GiB RAM, {os}, kernel {}",
        mem_kb / (1u64 << 20) as f64,
        kernel.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_limits_and_meminfo() {
        let status = "Name:\tetcd\nVmPeak:\t  999 kB\nVmHWM:\t   5120 kB\nVmRSS:\t    4096 kB\n";
        assert_eq!(parse_status(status), Some(Memory { rss_kb: 4096, hwm_kb: 5120 }));
        assert_eq!(parse_status("Name:\tx\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             95000                95000                processes \n\
                      Max open files            20000                20000                files     \n";
        assert_eq!(parse_open_files(limits), Some(20000));
        assert_eq!(parse_open_files("Max open files unlimited unlimited files"), None);
        assert_eq!(parse_mem_available("MemTotal: 10 kB\nMemAvailable:   2048 kB\n"), Some(2 << 20));
    }

    #[test]
    fn reads_own_process() {
        let m = memory(Proc::Me).expect("readable");
        assert!(m.rss_kb > 0 && m.hwm_kb >= m.rss_kb);
        assert!(open_file_limit(Proc::Me).is_some());
        assert!(mem_available().is_some());
        assert!(!name(Proc::Me).is_empty());
        assert!(machine_line().contains(" cores ("), "{}", machine_line());
        assert!(memory(Proc::Pid(u32::MAX)).is_err());
    }
}
