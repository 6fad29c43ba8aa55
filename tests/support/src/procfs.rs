//! What `/proc` tells about a process and the machine: resident memory (VmRSS, VmHWM), CPU
//! time, open files and listening sockets, the process name, the open-file limit, the memory
//! available and the machine in one line. Tests and the benchmark tables read a server's figures
//! from outside, as etcd's benchmarks do.

use std::path::PathBuf;
use std::time::Duration;

/// Linux reports `utime` and `stime` in USER_HZ ticks, which is 100 on every architecture's
/// user-space ABI.
const USER_HZ: f64 = 100.0;

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

/// CPU time a process has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Seconds in user mode.
    pub user: f64,
    /// Seconds in the kernel on the process's behalf.
    pub sys: f64,
}

impl CpuTimes {
    /// The time used since `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self { user: (self.user - earlier.user).max(0.0), sys: (self.sys - earlier.sys).max(0.0) }
    }

    /// User and system time together.
    pub fn total(self) -> Duration {
        Duration::from_secs_f64(self.user + self.sys)
    }
}

/// The CPU time of `proc`, `None` where `/proc` is missing or the process is gone.
pub fn cpu_times(proc: Proc) -> Option<CpuTimes> {
    parse_stat(&std::fs::read_to_string(proc.path("stat")).ok()?)
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

/// How many files `proc` has open (0 when unreadable).
pub fn open_fds(proc: Proc) -> usize {
    std::fs::read_dir(proc.path("fd")).map_or(0, |d| d.count())
}

/// Whether process `pid` holds the socket listening on 127.0.0.1:`port`: the socket's inode
/// from `/proc/net/tcp` among the process's open files.
pub fn listens_on(pid: u32, port: u16) -> bool {
    listens_at(pid, std::net::Ipv4Addr::LOCALHOST, port)
}

/// Whether process `pid` holds the socket listening on `ip`:`port`, in the process's own
/// network namespace (`/proc/PID/net/tcp`: a server run by `ip netns exec` lists its sockets
/// there, not in ours).
pub fn listens_at(pid: u32, ip: std::net::Ipv4Addr, port: u16) -> bool {
    let tcp = std::fs::read_to_string(Proc::Pid(pid).path("net/tcp")).unwrap_or_default();
    let Some(inode) = listening_inode_at(&tcp, ip, port) else {
        return false;
    };
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir(Proc::Pid(pid).path("fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy() == socket))
}

/// The inode of the socket in state LISTEN on 127.0.0.1:`port` in a `/proc/net/tcp` text.
pub fn listening_inode(tcp: &str, port: u16) -> Option<&str> {
    listening_inode_at(tcp, std::net::Ipv4Addr::LOCALHOST, port)
}

/// The inode of the socket in state LISTEN on `ip`:`port` in a `/proc/net/tcp` text (which
/// prints the address's bytes as a little-endian number).
pub fn listening_inode_at(tcp: &str, ip: std::net::Ipv4Addr, port: u16) -> Option<&str> {
    let local = format!("{:08X}:{port:04X}", u32::from_le_bytes(ip.octets()));
    tcp.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A"))
            .then(|| fields.get(9).copied())?
    })
}
