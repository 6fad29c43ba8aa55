//! Running one command as a process: the tokio runtime (`--threads`), Ctrl-C, the output and
//! the exit code. `actcd-bench` runs its commands through here, and so does any program that
//! drives the load client (the seed tables).

use crate::output::Out;
use crate::settings::Settings;
use crate::stop::Stop;
use std::future::Future;
use std::time::Duration;

/// A command that runs against the endpoints.
pub trait Run {
    /// The command's name, as etcd benchmark names it (and as the JSON document's `command`).
    fn name(&self) -> &'static str;
    /// Runs the command; a failure stops `stop` with the reason, the report goes to `out`.
    fn run(self, settings: &Settings, stop: &Stop, out: &Out) -> impl Future<Output = ()>;
}

/// Runs `command` on a runtime of `settings.threads` threads, with Ctrl-C stopping the run (a
/// second Ctrl-C quits), and finishes the output. Returns the exit code: 0 on a finished run,
/// 1 when it stopped early (unreachable endpoint, fatal error, stall, Ctrl-C). `program` names
/// the process in messages.
pub fn execute(program: &'static str, settings: &Settings, command: impl Run) -> i32 {
    let built = if settings.threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(settings.threads).enable_all().build()
    };
    let runtime = match built {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{program}: cannot start the tokio runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(async move {
        let stop = Stop::new();
        let s = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                s.stop("interrupted (Ctrl-C)");
                eprintln!("\n{program}: interrupted; reporting what completed (Ctrl-C again quits)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        let out = Out::new(command.name(), settings);
        command.run(settings, &stop, &out).await;
        out.finish(program, stop.reason())
    });
    // Requests dropped by a stop may still hold tasks; don't wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}
