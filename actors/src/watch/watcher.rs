//! One watch's record in its shard, made from the [`WatchSpec`] its stream sent: what it covers,
//! where its next event comes from, and how it filters.

use actcd_proto::key_range::KeyRange;

use super::messages::{StreamId, WatchSpec};

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

/// A watch's key and range end, inline when together they are short (the common case: a
/// watch on one key of up to 21 bytes costs no allocation of its own), boxed otherwise.
#[derive(Debug, Clone)]
enum KeyBytes {
    Inline { key_len: u8, len: u8, bytes: [u8; INLINE_KEY_BYTES] },
    Heap { key_len: u32, bytes: Box<[u8]> },
}

/// Bytes of key plus range end kept inside the record: what fills a 24-byte field.
const INLINE_KEY_BYTES: usize = 21;

impl KeyBytes {
    fn new(key: &[u8], range_end: &[u8]) -> Self {
        let len = key.len() + range_end.len();
        if len <= INLINE_KEY_BYTES {
            let mut bytes = [0; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            bytes[key.len()..len].copy_from_slice(range_end);
            // Both lengths are at most INLINE_KEY_BYTES, so they fit a byte.
            Self::Inline { key_len: key.len() as u8, len: len as u8, bytes }
        } else {
            let mut bytes = Vec::with_capacity(len);
            bytes.extend_from_slice(key);
            bytes.extend_from_slice(range_end);
            // A key longer than 4 GiB cannot arrive: gRPC messages are far smaller.
            let key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
            Self::Heap { key_len, bytes: bytes.into_boxed_slice() }
        }
    }

    fn parts(&self) -> (&[u8], &[u8]) {
        match self {
            Self::Inline { key_len, len, bytes } => bytes[..*len as usize].split_at(*key_len as usize),
            Self::Heap { key_len, bytes } => bytes.split_at(*key_len as usize),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Inline { .. } => 0,
            Self::Heap { bytes, .. } => bytes.len(),
        }
    }
}

/// Revisions a record can hold: 56 bits, far past the store's 42-bit revisions. A start
/// revision beyond is clamped, which changes nothing: the store never gets there.
const REVISION_BITS: u32 = 56;
const MAX_REVISION: i64 = (1 << (REVISION_BITS - 1)) - 1;
const MIN_REVISION: i64 = -(1 << (REVISION_BITS - 1));

/// A watch record in a shard: 48 bytes, keys included when short. A shard may hold millions.
#[derive(Debug, Clone)]
pub struct Watcher {
    keys: KeyBytes,
    /// The next revision this watcher has not been sent (high 56 bits, signed) and the
    /// [`flags`] bits (low 8 bits), in one word.
    revision_and_flags: u64,
    /// Owning stream.
    pub stream: StreamId,
    /// Id within the stream.
    pub watch_id: i64,
}

fn pack(revision: i64, flag_bits: u8) -> u64 {
    ((revision.clamp(MIN_REVISION, MAX_REVISION) << 8) as u64) | u64::from(flag_bits)
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
            keys: KeyBytes::new(&spec.key, &spec.range_end),
            revision_and_flags: pack(spec.start_revision, f),
            stream: spec.stream,
            watch_id: spec.watch_id,
        }
    }

    /// The first key.
    pub fn key(&self) -> &[u8] {
        self.keys.parts().0
    }

    /// The range end: empty for a single key, "\0" for every key >= the key.
    pub fn range_end(&self) -> &[u8] {
        self.keys.parts().1
    }

    /// The key and range end, read by etcd's rule.
    pub fn range(&self) -> KeyRange<'_> {
        let (key, range_end) = self.keys.parts();
        KeyRange::new(key, range_end)
    }

    /// The next revision this watcher has not been sent.
    pub fn next_rev(&self) -> i64 {
        (self.revision_and_flags as i64) >> 8
    }

    /// Moves the next revision.
    pub fn set_next_rev(&mut self, revision: i64) {
        self.revision_and_flags = pack(revision, self.flag_bits());
    }

    fn flag_bits(&self) -> u8 {
        (self.revision_and_flags & 0xff) as u8
    }

    /// True when `key` is in the watched key or range.
    pub fn covers(&self, key: &[u8]) -> bool {
        self.range().contains(key)
    }

    /// True when the watcher wants an event of this type (`is_delete`).
    pub fn wants(&self, is_delete: bool) -> bool {
        if is_delete {
            !self.has(flags::NO_DELETE)
        } else {
            !self.has(flags::NO_PUT)
        }
    }

    /// Whether a flag is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flag_bits() & flag != 0
    }

    /// Sets a flag.
    pub fn set(&mut self, flag: u8) {
        self.revision_and_flags |= u64::from(flag);
    }

    /// Clears a flag.
    pub fn clear(&mut self, flag: u8) {
        self.revision_and_flags &= !u64::from(flag);
    }

    /// Heap bytes of its keys (none when they are inline).
    pub fn heap_bytes(&self) -> usize {
        self.keys.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn a_record_is_small_and_covers_its_range() {
        assert_eq!(std::mem::size_of::<Option<Watcher>>(), 48);
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
        let long = Watcher::new(&spec(b"a-key-longer-than-the-inline-room", b"b"));
        assert_eq!(long.range_end(), b"b");
        assert!(long.covers(b"a-key-longer-than-the-inline-room/x") && long.heap_bytes() > 0);
        assert_eq!(range.heap_bytes(), 0, "short keys live in the record");
    }

    #[test]
    fn revision_and_flags_share_a_word() {
        let mut w = Watcher::new(&WatchSpec {
            stream: 1,
            watch_id: 2,
            key: Bytes::from_static(b"k"),
            range_end: Bytes::new(),
            start_revision: -5,
            prev_kv: true,
            no_put: false,
            no_delete: false,
            progress_notify: false,
        });
        assert_eq!(w.next_rev(), -5);
        w.set(flags::SYNCED);
        w.set_next_rev(1 << 42);
        assert_eq!(w.next_rev(), 1 << 42);
        assert!(w.has(flags::SYNCED) && w.has(flags::PREV_KV) && !w.has(flags::NOTIFIED));
        w.clear(flags::SYNCED);
        assert!(!w.has(flags::SYNCED) && w.has(flags::PREV_KV));
        w.set_next_rev(i64::MAX);
        assert_eq!(w.next_rev(), MAX_REVISION, "far future start revisions are clamped");
    }
}
