//! One watch: what it covers, where its next event comes from, and how it filters.

use bytes::Bytes;

use super::messages::StreamId;

/// A watch as its stream created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSpec {
    /// The stream that owns it.
    pub stream: StreamId,
    /// Its id within the stream.
    pub watch_id: i64,
    /// The first key (etcd turns an empty key into "\0").
    pub key: Bytes,
    /// Empty for a single key, "\0" for every key >= `key`, else the exclusive end.
    pub range_end: Bytes,
    /// The first revision whose events it wants.
    pub start_revision: i64,
    /// Attach the previous key-value to events.
    pub prev_kv: bool,
    /// Drop PUT events.
    pub no_put: bool,
    /// Drop DELETE events.
    pub no_delete: bool,
    /// Send periodic progress notifications while idle.
    pub progress_notify: bool,
}

/// Flag bits of a [`Watcher`].
pub mod flags {
    /// Attach prev_kv.
    pub const PREV_KV: u8 = 1;
    /// Drop PUTs.
    pub const NO_PUT: u8 = 2;
    /// Drop DELETEs.
    pub const NO_DELETE: u8 = 4;
    /// Periodic progress notifications.
    pub const PROGRESS: u8 = 8;
    /// Is in the synced set (indexed and fed live events).
    pub const SYNCED: u8 = 16;
    /// Got an event (or a notification) since the last progress tick.
    pub const NOTIFIED: u8 = 32;
}

/// A watch record in a shard. Kept small: a shard may hold millions.
#[derive(Debug, Clone)]
pub struct Watcher {
    /// Owning stream.
    pub stream: StreamId,
    /// Id within the stream.
    pub watch_id: i64,
    /// First key.
    pub key: Box<[u8]>,
    /// Range end as in [`WatchSpec::range_end`].
    pub range_end: Box<[u8]>,
    /// The next revision this watcher has not been sent.
    pub next_rev: i64,
    /// [`flags`] bits.
    pub flags: u8,
}

impl Watcher {
    /// A record for `spec`.
    pub fn new(spec: &WatchSpec) -> Self {
        let mut f = 0;
        if spec.prev_kv {
            f |= flags::PREV_KV;
        }
        if spec.no_put {
            f |= flags::NO_PUT;
        }
        if spec.no_delete {
            f |= flags::NO_DELETE;
        }
        if spec.progress_notify {
            f |= flags::PROGRESS;
        }
        Self {
            stream: spec.stream,
            watch_id: spec.watch_id,
            key: spec.key.to_vec().into_boxed_slice(),
            range_end: spec.range_end.to_vec().into_boxed_slice(),
            next_rev: spec.start_revision,
            flags: f,
        }
    }

    /// True when `key` is in the watched key or range.
    pub fn covers(&self, key: &[u8]) -> bool {
        match &*self.range_end {
            [] => key == &*self.key,
            [0] => key >= &*self.key,
            end => key >= &*self.key && key < end,
        }
    }

    /// True when the watcher wants an event of this type (`is_delete`).
    pub fn wants(&self, is_delete: bool) -> bool {
        if is_delete {
            self.flags & flags::NO_DELETE == 0
        } else {
            self.flags & flags::NO_PUT == 0
        }
    }

    /// Whether a flag is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Approximate heap bytes, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.key.len() + self.range_end.len()
    }
}
