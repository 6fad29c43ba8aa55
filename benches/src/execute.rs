//! Running one command as a process: the command line (the global flags, then a command), the
//! tokio runtime, Ctrl-C, the output and the exit code. `actcd-bench` and `actcd-tables` both
//! run their commands through here.

use crate::output::Out;
use crate::settings::{Global, Settings};
use crate::stop::Stop;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::future::Future;
use std::time::Duration;

/// A command line: the flags every command takes, then one of the commands `C`.
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Boolean flags take an optional value: --sequential-keys, --sequential-keys=true or =false."
)]
pub struct Cli<C: Subcommand> {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: C,
}

pub trait Run: Sized {
    /// Checks the flags for bad values and combinations, before anything connects.
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
    /// A mode that only reads files: its exit code, with no runtime, report or client CPU line.
    fn offline(self) -> Result<i32, Self> {
        Err(self)
    }
    /// Runs the command; a failure stops `stop` with the reason, the report goes to `out`.
    fn run(self, settings: &Settings, stop: &Stop, out: &Out) -> impl Future<Output = ()>;
}

/// Parses the command line, runs the command and exits with its code: 0 on a finished run, 1
/// when it stopped early (unreachable endpoint, fatal error, stall, Ctrl-C), 2 on bad flags.
pub fn main<C: Subcommand + Run>(program: &'static str, about: &'static str) -> ! {
    let matches = Cli::<C>::command().name(program).about(about).get_matches();
    let name = matches.subcommand_name().unwrap_or_default().to_string();
    let cli = Cli::<C>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.global.settings().and_then(|s| cli.command.validate().map(|()| s)) {
        Err(e) => {
            eprintln!("{program} {name}: {e}");
            2
        }
        Ok(settings) => match cli.command.offline() {
            Ok(code) => code,
            Err(command) => execute(program, &name, &settings, command),
        },
    };
    std::process::exit(code)
}

/// Runs `command` (named `name` in its JSON document) on one thread, which keeps the client to
/// one core of a machine it shares with the server and spares it cross-thread wake-ups, with
/// Ctrl-C stopping the run (a second Ctrl-C quits); returns the exit code.
pub fn execute(program: &'static str, name: &str, settings: &Settings, command: impl Run) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
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
        let out = Out::new(name, settings);
        command.run(settings, &stop, &out).await;
        out.finish(program, stop.reason())
    });
    // Requests dropped by a stop may still hold tasks; don't wait for them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// `T`'s flags parsed from `args` on their own, as a test of one command's flags reads them.
pub fn parse_flags<T: Args>(args: &[&str]) -> Result<T, String> {
    let matches =
        T::augment_args(clap::Command::new("flags")).try_get_matches_from([&["flags"][..], args].concat());
    matches.and_then(|m| T::from_arg_matches(&m)).map_err(|e| e.to_string())
}
