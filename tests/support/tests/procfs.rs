//! What `/proc` is read for: a process's memory, CPU time, limits and sockets, and the machine.

use actcd_test_support::procfs::*;

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
    assert!(open_fds(Proc::Me) >= 3);
}

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
    let t = cpu_times(Proc::Me).expect("/proc/self/stat is readable on Linux");
    assert!(t.user >= 0.0 && t.sys >= 0.0);
    assert!(parse_stat("garbage").is_none());
    assert!(cpu_times(Proc::Pid(u32::MAX)).is_none());
}

#[test]
fn finds_the_listening_socket() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let port = listener.local_addr().expect("bound").port();
    assert!(listens_on(std::process::id(), port));
    drop(listener);
    assert!(!listens_on(std::process::id(), port));
    let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
               0: 0100007F:0929 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1";
    assert_eq!(listening_inode(tcp, 0x0929), Some("4242"));
    assert_eq!(listening_inode(tcp, 80), None);
}
