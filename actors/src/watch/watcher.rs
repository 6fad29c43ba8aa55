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

/// A watch record in a shard. Kept small (48 bytes plus its keys): a shard may hold millions.
#[derive(Debug, Clone)]
pub struct Watcher {
    /// The key followed by the range end, in one allocation.
    keys: Box<[u8]>,
    /// Length of the key within `keys`.
    key_len: u32,
    /// [`flags`] bits.
    pub flags: u8,
    /// Owning stream.
    pub stream: StreamId,
    /// Id within the stream.
    pub watch_id: i64,
    /// The next revision this watcher has not been sent.
    pub next_rev: i64,
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
        let mut keys = Vec::with_capacity(spec.key.len() + spec.range_end.len());
        keys.extend_from_slice(&spec.key);
        keys.extend_from_slice(&spec.range_end);
        Self {
            keys: keys.into_boxed_slice(),
            key_len: u32::try_from(spec.key.len()).unwrap_or(u32::MAX),
            flags: f,
            stream: spec.stream,
            watch_id: spec.watch_id,
            next_rev: spec.start_revision,
        }
    }

    /// The first key.
    pub fn key(&self) -> &[u8] {
        &self.keys[..self.key_len as usize]
    }

    /// The range end: empty for a single key, "\0" for every key >= the key.
    pub fn range_end(&self) -> &[u8] {
        &self.keys[self.key_len as usize..]
    }

    /// True when `key` is in the watched key or range.
    pub fn covers(&self, key: &[u8]) -> bool {
        let start = self.key();
        match self.range_end() {
            [] => key == start,
            [0] => key >= start,
            end => key >= start && key < end,
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

    /// Heap bytes of its keys.
    pub fn heap_bytes(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_record_is_small_and_covers_its_range() {
        assert!(std::mem::size_of::<Option<Watcher>>() <= 48);
        let spec = |key: &'static [u8], end: &'static [u8]| WatchSpec {
            stream: 1,
            watch_id: 2,
            key: Bytes::from_static(key),
            range_end: Bytes::from_static(end),
            start_revision: 3,
            prev_kv: false,
            no_put: true,
            no_delete: false,
            progress_notify: false,
        };
        let one = Watcher::new(&spec(b"k", b""));
        assert!(one.covers(b"k") && !one.covers(b"k2"));
        assert!(!one.wants(false) && one.wants(true));
        let range = Watcher::new(&spec(b"a", b"c"));
        assert_eq!((range.key(), range.range_end()), (&b"a"[..], &b"c"[..]));
        assert!(range.covers(b"b") && !range.covers(b"c"));
        let open = Watcher::new(&spec(b"m", b"\0"));
        assert!(open.covers(b"zzz") && !open.covers(b"a"));
    }
}
