//! The state the writer and its readers share, and the rule that keeps reads consistent.
//!
//! Visibility: the writer updates the index as it applies each command, but readers read at
//! `visible`, the newest revision that is on disk, and the index never shows a revision newer
//! than the one asked for. So a batch's changes appear to readers all at once, after its fsync,
//! and a reader never waits for one.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::apply::alarm::AlarmList;
use crate::auth_store::simple_tokens::SimpleTokens;
use crate::auth_store::AuthState;
use crate::error::StoreError;
use crate::mvcc::index::Index;

/// State the writer and the readers share.
pub(crate) struct Shared<E> {
    /// Where the records live.
    pub(crate) engine: E,
    /// Written only by the writer and only briefly: readers take it shared for the index pass
    /// of a read, never across an engine read or an fsync.
    pub(crate) index: RwLock<Index>,
    /// Newest durable revision; readers never read past it.
    pub(crate) visible: AtomicI64,
    /// Compaction revision; raised before the index is compacted so overtaken reads notice.
    pub(crate) compacted: AtomicI64,
    /// Engine size after the last commit, for quota checks and Status.
    pub(crate) db_size: AtomicU64,
    /// Commands applied and durable (etcd's applied index).
    pub(crate) applied_index: AtomicU64,
    /// The active alarms, as of the last commit.
    pub(crate) alarms: RwLock<AlarmList>,
    /// The auth state, as of the last commit; replaced whole by a commit that changes it, so
    /// a reader holds one consistent state for a whole request.
    pub(crate) auth: RwLock<Arc<AuthState>>,
    /// The simple tokens this member learnt from applied Authenticate commands.
    pub(crate) tokens: Mutex<SimpleTokens>,
}

impl<E> Shared<E> {
    pub(crate) fn read_index(&self) -> Result<RwLockReadGuard<'_, Index>, StoreError> {
        self.index.read().map_err(|_| StoreError::Stopped("index lock poisoned".into()))
    }

    pub(crate) fn write_index(&self) -> Result<RwLockWriteGuard<'_, Index>, StoreError> {
        self.index.write().map_err(|_| StoreError::Stopped("index lock poisoned".into()))
    }
}
