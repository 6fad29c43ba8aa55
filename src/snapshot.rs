//! `actcd snapshot restore FILE --data-dir DIR`: a snapshot file in etcd's format (from
//! `etcdctl snapshot save`, against actcd or etcd) into a new data dir, history and all.
//! It is a migration ([`crate::migrate`]): the SHA-256 is verified first, the store is
//! written beside the target and renamed in only once it hashes as the file does, so a
//! damaged file never becomes a data dir. The restored dir belongs to no member until one
//! starts on it (see `store::mvcc::member`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Commands on snapshot files.
#[derive(Debug, Parser)]
#[command(name = "actcd snapshot", bin_name = "actcd snapshot", about = "Restore snapshots")]
pub struct SnapshotCli {
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(Debug, Subcommand)]
enum SnapshotCommand {
    /// Restores a snapshot (from `etcdctl snapshot save`, against actcd or etcd) into a new data dir.
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
        SnapshotCommand::Restore { file, data_dir } => match crate::migrate::migrate(&file, &data_dir) {
            Ok(m) => {
                println!(
                    "restored snapshot {} into {}: {} records, {} leases, revision {}, compacted at {}, HashKV {}",
                    file.display(),
                    data_dir.display(),
                    m.records,
                    m.leases,
                    m.revision,
                    m.compacted,
                    m.hash
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("actcd: snapshot restore: {err}");
                ExitCode::FAILURE
            }
        },
    }
}
