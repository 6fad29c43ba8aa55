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

use actcd_proto::mvccpb::KeyValue;
use actcd_store::auth_store::auth_state;
use actcd_store::backend::codec::{self, COMPACTED_KEY, FORMAT_KEY, FORMAT_VERSION};
use actcd_store::backend::engine::{Engine, Family, WriteSet};
use actcd_store::mvcc::hash;
use actcd_store::mvcc::revision::Revision;
use actcd_store::{RocksEngine, StoreConfig, StoreCore, StoreError};

use crate::etcd_file::backend::{BackendError, EtcdBackend};

/// Records written per RocksDB batch: large enough that a batch's overhead vanishes, small
/// enough that a batch holds a few MiB.
const RECORDS_PER_BATCH: usize = 4096;

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
    #[error("revision {main}.{sub}: {why}")]
    Unrepresentable {
        /// The main revision.
        main: i64,
        /// The sub revision.
        sub: i64,
        /// Why.
        why: String,
    },
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

/// Writes the history, the leases and the compaction into a store at `dir`.
fn write_store(backend: &EtcdBackend, dir: &Path) -> Result<(), MigrateError> {
    let engine = RocksEngine::open(dir)?;
    let compacted = backend.compact_revision()?;
    let progress = indicatif::ProgressBar::new_spinner().with_message("records");
    progress.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos} {msg} ({per_sec}, {elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let mut set = WriteSet::default();
    let mut in_set = 0;
    let mut failed = None;
    backend.records(&mut |record| {
        let revision = Revision::new(record.main, record.sub);
        let key = match revision.try_to_key_bytes() {
            Ok(key) => key,
            Err(e) => {
                failed = Some(MigrateError::Unrepresentable {
                    main: record.main,
                    sub: record.sub,
                    why: e.to_string(),
                });
                return Ok(false);
            }
        };
        // actcd's tombstones carry their revision as well as the key.
        let kv = if record.tombstone {
            KeyValue { key: record.kv.key, mod_revision: record.main, ..KeyValue::default() }
        } else {
            record.kv
        };
        set.put(Family::History, key.to_vec(), codec::encode_history_value(record.tombstone, &kv));
        in_set += 1;
        if in_set == RECORDS_PER_BATCH {
            // Unsynced: the last batch's fsync makes all of them durable, and a crash before
            // it leaves only the staging dir, which the next run removes.
            if let Err(e) = engine.commit_by_log(&std::mem::take(&mut set)) {
                failed = Some(e.into());
                return Ok(false);
            }
            in_set = 0;
        }
        progress.inc(1);
        Ok(true)
    })?;
    progress.finish_and_clear();
    if let Some(err) = failed {
        return Err(err);
    }
    for (id, ttl) in backend.leases()? {
        set.put(Family::Lease, codec::encode_i64(id), codec::encode_i64(ttl));
    }
    let auth = backend.auth()?;
    if let Some(enabled) = auth.enabled {
        set.put(Family::Meta, auth_state::ENABLED_KEY.to_vec(), enabled);
    }
    if let Some(revision) = auth.revision {
        set.put(Family::Meta, auth_state::REVISION_KEY.to_vec(), revision);
    }
    for (prefix, records) in [(auth_state::USER_PREFIX, auth.users), (auth_state::ROLE_PREFIX, auth.roles)] {
        for (name, record) in records {
            set.put(Family::Meta, [prefix, &name].concat(), record);
        }
    }
    set.put(Family::Meta, COMPACTED_KEY.to_vec(), codec::encode_i64(compacted));
    set.put(Family::Meta, FORMAT_KEY.to_vec(), FORMAT_VERSION.to_vec());
    engine.commit(&set)?;
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
    let mut records = 0;
    engine.scan(Family::History, &[], &mut |_, _| {
        records += 1;
        Ok(true)
    })?;
    let mut leases = 0;
    engine.scan(Family::Lease, &[], &mut |_, _| {
        leases += 1;
        Ok(true)
    })?;
    Ok(Migrated { records, leases, revision, compacted, hash: got.hash })
}
