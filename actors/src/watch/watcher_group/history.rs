//! The store as the watch tree reads it: whole revisions of history for catch-up, a key's
//! earlier value for prev_kv, the compaction revision. The read view implements it.

use actcd_proto::mvccpb::{Event, KeyValue};

use actcd_store::backend::engine::Engine;
use actcd_store::{HistoryChunk, ReadView, StoreError};

use super::group::is_delete;

/// The store as the watch tree reads it.
pub trait History {
    /// Whole revisions of history from `from` to `to` (see `ReadView::history`).
    fn history(&self, from: i64, to: i64, max_bytes: usize) -> Result<HistoryChunk, StoreError>;
    /// A key's value as of `revision`, for prev_kv.
    fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError>;
    /// The compaction revision.
    fn compacted(&self) -> i64;
}

impl<E: Engine> History for ReadView<E> {
    fn history(&self, from: i64, to: i64, max_bytes: usize) -> Result<HistoryChunk, StoreError> {
        ReadView::history(self, from, to, max_bytes)
    }
    fn get_at(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>, StoreError> {
        ReadView::get_at(self, key, revision)
    }
    fn compacted(&self) -> i64 {
        self.compacted_revision()
    }
}

/// The previous version of an event's key (none for a creation, or if compacted).
pub(super) fn previous(ev: &Event, history: &impl History) -> Option<KeyValue> {
    let kv = ev.kv.as_ref()?;
    if !is_delete(ev) && kv.version == 1 {
        return None;
    }
    history.get_at(&kv.key, kv.mod_revision - 1).ok().flatten()
}
