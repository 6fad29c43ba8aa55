//! The actcd server binary.

use std::process::ExitCode;

use clap::Parser;

use actcd::config::Config;

// jemalloc returns memory to the OS and exposes allocation statistics.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`. By default jemalloc purges unused pages only while
/// it allocates, and only 10 s after they were freed: a server that goes idle after a burst of
/// large reads kept ~800 MB of dirty pages for as long as it stayed idle. A background thread
/// purges them without waiting for an allocation, 1 s after they are freed; muzzy pages
/// (MADV_FREE, still counted in RSS) are skipped and the pages go straight back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
// An unsafe exception: jemalloc declares `malloc_conf` as `const char *`, so the static must be
// a pointer to this NUL-terminated literal, which lives for the whole process.
#[allow(unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: Option<&'static std::ffi::c_char> =
    Some(unsafe { &*c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr() });

fn main() -> ExitCode {
    actcd::c_heap::keep_large_allocations_mmapped();
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
