//! The actcd server binary.

use std::process::ExitCode;

use clap::Parser;

use actcd::config::Config;

// jemalloc returns memory to the OS and exposes allocation statistics.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// RocksDB allocates through glibc's malloc (jemalloc serves Rust's allocations only). glibc
/// raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB), so the
/// memtables' multi-MiB arena blocks move onto its heap, where freed ones stay resident: 323 MB
/// of RSS after loading 1M keys × 5 versions of 1 KiB, against 259 MB with a fixed threshold,
/// which keeps large blocks mmapped and gives them back to the OS when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_large_c_allocations_mmapped() {
    const THRESHOLD: libc::c_int = 1 << 20;
    // The one unsafe call: mallopt only sets a malloc parameter, before any other thread runs.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_c_allocations_mmapped() {}

fn main() -> ExitCode {
    keep_large_c_allocations_mmapped();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if actcd::snapshot::is_snapshot_command(&args) {
        return actcd::snapshot::run(&args);
    }
    let config = match Config::try_parse_from(&args) {
        Ok(config) => config,
        Err(err) if err.use_stderr() => {
            // One line, like etcd's flag errors; --help has the rest.
            let text = err.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("actcd: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
        Err(help_or_version) => {
            let _ = help_or_version.print();
            return ExitCode::SUCCESS;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(config.tracing_level())),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(err) = actcd_actors::failpoints::configure_from_env() {
        eprintln!("actcd: FAILPOINTS: {err}");
        return ExitCode::from(2);
    }
    match actcd::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("actcd: {err:#}");
            ExitCode::FAILURE
        }
    }
}
