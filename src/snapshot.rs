//! `actcd snapshot restore FILE --data-dir DIR`: turns a snapshot that `etcdctl snapshot save`
//! took from actcd back into a data dir. The snapshot's SHA-256 is verified and the store is
//! opened once before the data dir appears, so a damaged file never becomes a data dir. The
//! restored dir belongs to no member until one starts on it (see `store::mvcc::member`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use actcd_actors::store::mvcc::{member, snapshot};
use actcd_actors::store::{RocksEngine, StoreConfig, StoreCore};

/// Commands on snapshot files.
#[derive(Debug, Parser)]
#[command(name = "actcd snapshot", bin_name = "actcd snapshot", about = "Restore actcd snapshots")]
pub struct SnapshotCli {
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(Debug, Subcommand)]
enum SnapshotCommand {
    /// Restores a snapshot (from `etcdctl snapshot save` against actcd) into a new data dir.
    Restore {
        /// The snapshot file.
        file: PathBuf,
        /// The data dir to create; it must not exist or be empty.
        #[arg(long = "data-dir", default_value = "default.actcd")]
        data_dir: PathBuf,
    },
}

/// True when the command line asks for a snapshot command rather than the server.
pub fn is_snapshot_command(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| a == "snapshot")
}

/// Runs `actcd snapshot ...` (`args` from the program name on).
pub fn run(args: &[OsString]) -> ExitCode {
    let cli = match SnapshotCli::try_parse_from(args.iter().skip(1)) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        SnapshotCommand::Restore { file, data_dir } => {
            let mut revision = 0;
            let restored = snapshot::restore(&file, &data_dir, |dir| {
                let engine = RocksEngine::open(dir)?;
                member::unbind(&engine)?;
                actcd_actors::raft::log_store::forget_cluster(&engine)?;
                let core = StoreCore::open(engine, StoreConfig::default())?;
                revision = core.current_revision();
                Ok(())
            });
            match restored {
                Ok(restored) => {
                    println!(
                        "restored snapshot {} into {} ({} files, {} bytes) at revision {revision}",
                        file.display(),
                        data_dir.display(),
                        restored.files,
                        restored.bytes
                    );
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("actcd: snapshot restore: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
