//! One group commit's changes before they are on disk: the engine writes, the values later
//! commands of the same batch must read, the events for watchers, and a compaction that only
//! takes effect once its record is durable.

use std::collections::HashMap;

use actcd_proto::mvccpb::{Event, KeyValue};

use crate::backend::engine::{Engine, WriteSet};
use crate::error::StoreError;
use crate::mvcc::range::{self, ValueSource};
use crate::mvcc::revision::Revision;

/// The changes of one group-commit batch that are not yet on disk.
#[derive(Default)]
pub struct Batch {
    /// What the commit writes.
    pub writes: WriteSet,
    /// Values written by this batch, so that later commands of the batch can read them.
    pub overlay: HashMap<Revision, KeyValue>,
    /// Commands applied into this batch.
    pub commands: u64,
    /// The events of the batch's changes in revision order, published after the commit.
    pub events: Vec<Event>,
    /// A compaction applied into this batch: readers see it (and the index drops what it
    /// removes) only once its record is durable, so a crash before the fsync can never have
    /// answered ErrCompacted for history that is still there after the restart.
    pub compaction: Option<i64>,
    /// The alarm list after this batch's Alarm commands, published once it is durable.
    pub alarms: Option<crate::apply::alarm::AlarmList>,
    /// The auth state after this batch's auth commands, published once it is durable.
    pub auth: Option<crate::auth_store::AuthState>,
    /// What this batch's auth commands do to the simple tokens, in order, once durable.
    pub tokens: Vec<TokenChange>,
}

/// A change to the simple tokens a member remembers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenChange {
    /// Authenticate: remember `token` for `user`.
    Issued {
        /// The token.
        token: String,
        /// Its user.
        user: String,
    },
    /// The user was deleted or its password changed: its tokens are void.
    UserVoid(String),
    /// Auth was disabled: every token is void.
    AllVoid,
}

/// Values as a command inside the batch sees them: the batch's own writes, then the engine.
pub struct OverlaySource<'b, E: Engine> {
    /// The batch's values by revision.
    pub overlay: &'b HashMap<Revision, KeyValue>,
    /// Where the durable values live.
    pub engine: &'b E,
}

impl<E: Engine> ValueSource for OverlaySource<'_, E> {
    fn load(&self, revisions: &[Revision]) -> Result<Vec<Option<KeyValue>>, StoreError> {
        let missing: Vec<Revision> =
            revisions.iter().filter(|r| !self.overlay.contains_key(r)).copied().collect();
        let mut stored = range::load_from_engine(self.engine, &missing)?.into_iter();
        Ok(revisions
            .iter()
            .map(|r| match self.overlay.get(r) {
                Some(kv) => Some(kv.clone()),
                None => stored.next().flatten(),
            })
            .collect())
    }
}
