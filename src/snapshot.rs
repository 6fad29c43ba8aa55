//! `actcd snapshot restore FILE --data-dir DIR`: a snapshot file in etcd's format (from
//! `etcdctl snapshot save`, against actcd or etcd) into a new data dir, history and all.
//! It is a migration ([`crate::migrate`]): the SHA-256 is verified first, the store is
//! written beside the target and renamed in only once it hashes as the file does, so a
//! damaged file never becomes a data dir. The restored dir belongs to no member until one
//! starts on it (see `actcd_store::backend::member`).

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

/// Runs `actcd snapshot ...`.
pub fn run(cli: SnapshotCli) -> ExitCode {
    match cli.command {
        SnapshotCommand::Restore { file, data_dir } => match crate::migrate::migrate(&file, &data_dir) {
            Ok(m) => {
                println!("restored snapshot {} into {}: {m}", file.display(), data_dir.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("actcd: snapshot restore: {err}");
                ExitCode::FAILURE
            }
        },
    }
}
