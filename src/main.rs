//! The actcd server binary.

use std::process::ExitCode;

use actcd_edge::config::{self, LoadError, Loaded, Note};

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

/// Parses the command line from the command's name on (`actcd migrate ...` parses as `migrate
/// ...`); --help answers with success, a bad argument with clap's message and status 2.
fn command<T: clap::Parser>(args: &[std::ffi::OsString]) -> Result<T, ExitCode> {
    T::try_parse_from(args.iter().skip(1)).map_err(|err| {
        let _ = err.print();
        if err.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    })
}

fn main() -> ExitCode {
    actcd::c_heap::keep_large_allocations_mmapped();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some("snapshot") => return command(&args).map_or_else(|code| code, actcd::snapshot::run),
        Some("migrate") => return command(&args).map_or_else(|code| code, actcd::migrate::run),
        _ => {}
    }
    let vars: Vec<_> = std::env::vars_os().collect();
    let Loaded { config, notes } = match config::load(&args, &vars) {
        Ok(loaded) => loaded,
        Err(LoadError::Flags(err)) if !err.use_stderr() => {
            // --help or --version.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(LoadError::Flags(err)) => {
            // One line, like etcd's flag errors; --help has the rest.
            eprintln!("actcd: {}", config::error_line(&err));
            return ExitCode::from(2);
        }
        Err(err) => {
            eprintln!("actcd: {err}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(actcd_edge::config::tracing_filter(&config.log_level))
        }))
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a log file or journald would keep the
        // escape codes as text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    for note in notes {
        match note {
            Note::Info(line) => tracing::info!("{line}"),
            Note::Warn(line) => tracing::warn!("{line}"),
        }
    }
    if let Err(err) = actcd_raft::failpoints::configure_from_env() {
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
