//! `actcd migrate --from-etcd FILE|DIR --data-dir DIR`: an etcd backend (a data dir, its
//! `member/snap/db`, or a file from `etcdctl snapshot save`) into an actcd data dir with the
//! same history: every revision since the last compaction with its create and mod revisions
//! and versions, the compaction revision, and the leases with their TTLs (the keys a lease
//! holds come with the keys). A watcher or an informer that last saw revision R on etcd goes
//! on from R on actcd.
//!
//! Nothing half-written is left: the store is written in `DIR.migrating` beside the target,
//! opened once as the server opens it (which finishes a compaction etcd had scheduled), and
//! checked before it is renamed into place: its HashKV, which is etcd's own hash, must equal
//! the one computed over the etcd file, and its revision the file's.
//!
//! The file is read by [`crate::etcd_file`]; here are the command and the writing of the store.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use actcd_store::backend::etcd_records::{self, Import, ImportError};
use actcd_store::mvcc::hash;
use actcd_store::{RocksEngine, StoreConfig, StoreCore, StoreError};

use crate::etcd_file::backend::{BackendError, EtcdBackend};

/// `actcd migrate`'s arguments.
#[derive(Debug, Parser)]
#[command(
    name = "actcd migrate",
    bin_name = "actcd migrate",
    about = "Import an etcd data dir or snapshot, history and all"
)]
pub struct MigrateCli {
    /// An etcd data dir, its member/snap/db, or a file from `etcdctl snapshot save`.
    #[arg(long = "from-etcd")]
    from_etcd: PathBuf,
    /// The actcd data dir to create; it must not exist or be empty.
    #[arg(long = "data-dir", default_value = "default.actcd")]
    data_dir: PathBuf,
}

/// Why a migration stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Reading etcd's file.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Writing or reopening the actcd store.
    #[error("the actcd store: {0}")]
    Store(#[from] StoreError),
    /// A file operation on the data dirs.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// The target already holds data.
    #[error("{0} exists and is not empty")]
    NotEmpty(PathBuf),
    /// etcd history actcd cannot hold.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The written store does not hash or count as the file does.
    #[error("the migrated store does not match the etcd file: {0}")]
    Mismatch(String),
}

/// What a migration wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// History records (puts and deletes).
    pub records: u64,
    /// Leases.
    pub leases: u64,
    /// The current revision.
    pub revision: i64,
    /// The compaction revision.
    pub compacted: i64,
    /// HashKV at the current revision, equal on etcd and actcd.
    pub hash: u32,
}

/// Runs `actcd migrate ...`.
pub fn run(cli: MigrateCli) -> ExitCode {
    match migrate(&cli.from_etcd, &cli.data_dir) {
        Ok(m) => {
            println!("migrated {} into {}: {m} (as etcd's)", cli.from_etcd.display(), cli.data_dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("actcd: migrate: {err}");
            ExitCode::FAILURE
        }
    }
}

impl std::fmt::Display for Migrated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records, {} leases, revision {}, compacted at {}, HashKV {}",
            self.records, self.leases, self.revision, self.compacted, self.hash
        )
    }
}

/// Migrates the etcd backend at `from` into a new data dir `to`.
pub fn migrate(from: &Path, to: &Path) -> Result<Migrated, MigrateError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e| MigrateError::Io(path, e)
    };
    if std::fs::read_dir(to).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(MigrateError::NotEmpty(to.to_path_buf()));
    }
    let backend = EtcdBackend::open(from)?;
    let staging = staging_dir(to);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    let written = write_store(&backend, &staging);
    let migrated = written.and_then(|_| check(&backend, &staging));
    match migrated {
        Ok(migrated) => {
            if to.exists() {
                std::fs::remove_dir(to).map_err(io(to))?;
            }
            std::fs::rename(&staging, to).map_err(io(to))?;
            if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
                actcd_raft::wal::sync_dir(parent).map_err(io(parent))?;
            }
            Ok(migrated)
        }
        Err(err) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(err)
        }
    }
}

fn staging_dir(to: &Path) -> PathBuf {
    let mut name = to.file_name().map(OsString::from).unwrap_or_else(|| OsString::from("data"));
    name.push(".migrating");
    to.with_file_name(name)
}

/// Writes the history, the leases, the auth store and the compaction into a store at `dir`.
fn write_store(backend: &EtcdBackend, dir: &Path) -> Result<(), MigrateError> {
    let mut import = Import::new(RocksEngine::open(dir)?);
    let compacted = backend.compact_revision()?;
    let progress = indicatif::ProgressBar::new_spinner().with_message("records");
    progress.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} {msg} ({per_sec}, {elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let mut failed = None;
    backend.records(
        &mut |record| match import.record(record.main, record.sub, record.tombstone, record.kv) {
            Ok(()) => {
                progress.inc(1);
                Ok(true)
            }
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        },
    )?;
    progress.finish_and_clear();
    if let Some(err) = failed {
        return Err(err.into());
    }
    import.finish(&backend.leases()?, backend.auth()?, compacted)?;
    Ok(())
}

/// Opens the written store as the server does and compares it with the etcd file.
fn check(backend: &EtcdBackend, dir: &Path) -> Result<Migrated, MigrateError> {
    let engine = RocksEngine::open(dir)?;
    let core = StoreCore::open(engine.clone(), StoreConfig::default())?;
    let (revision, compacted) = (core.current_revision(), core.read_view().compacted_revision());
    let (expected, newest) = backend.hash_kv(compacted)?;
    if revision != newest.max(1) {
        return Err(MigrateError::Mismatch(format!("revision {revision}, the file's is {newest}")));
    }
    let got = hash::hash_kv(&engine, 0, revision, compacted)?;
    if got.hash != expected {
        return Err(MigrateError::Mismatch(format!("HashKV {} where the file's is {expected}", got.hash)));
    }
    let (records, leases) = etcd_records::counts(&engine)?;
    Ok(Migrated { records, leases, revision, compacted, hash: got.hash })
}
