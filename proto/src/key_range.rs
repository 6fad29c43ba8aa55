//! etcd's key-range rule, the one way every `(key, range_end)` pair of the API is read: Range,
//! DeleteRange, Watch, a Txn's Compare, and an auth permission.
//!
//! etcd's worked example (etcdserverpb's RangeRequest comment, and clientv3's `WithPrefix` /
//! `WithFromKey`), on the keys `a`, `ab`, `b`, `c`:
//!
//! | key  | range_end | means           | selects        |
//! |------|-----------|-----------------|----------------|
//! | `a`  | (empty)   | the key `a`     | `a`            |
//! | `a`  | `c`       | `[a, c)`        | `a`, `ab`, `b` |
//! | `a`  | `b`       | prefix `a`      | `a`, `ab`      |
//! | `b`  | `\0`      | every key ≥ `b` | `b`, `c`       |
//! | `\0` | `\0`      | every key       | all four       |
//! | `c`  | `a`       | `[c, a)`        | nothing        |
//!
//! A prefix is not a kind of its own on the wire: the client sends `[p, prefix_end(p))`, and
//! `prefix_end` of a prefix that has no successor (empty, or all `0xff`) is `\0`, so such a
//! prefix becomes "every key from p on".

/// One `(key, range_end)` pair, read by etcd's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRange<'a> {
    /// `range_end` empty: the key alone.
    Key(&'a [u8]),
    /// `range_end` is `"\0"`: every key at or after the start.
    From(&'a [u8]),
    /// `[start, end)`; selects nothing when `start >= end`.
    Between(&'a [u8], &'a [u8]),
}

impl<'a> KeyRange<'a> {
    /// Reads a request's `key` and `range_end`.
    pub fn new(key: &'a [u8], range_end: &'a [u8]) -> Self {
        match range_end {
            [] => KeyRange::Key(key),
            [0] => KeyRange::From(key),
            end => KeyRange::Between(key, end),
        }
    }

    /// The first key the range can hold.
    pub fn start(&self) -> &'a [u8] {
        match *self {
            KeyRange::Key(k) | KeyRange::From(k) | KeyRange::Between(k, _) => k,
        }
    }

    /// Whether `key` is in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        match *self {
            KeyRange::Key(k) => key == k,
            KeyRange::From(start) => key >= start,
            KeyRange::Between(start, end) => key >= start && key < end,
        }
    }

    /// A range with no key in it: `[start, end)` with `start >= end`. (etcd answers a Range over
    /// it with nothing, and refuses a watch on it.)
    pub fn is_empty(&self) -> bool {
        matches!(*self, KeyRange::Between(start, end) if start >= end)
    }
}

/// The range end that selects every key with `prefix`: the prefix with its last byte below
/// `0xff` incremented and what follows dropped; `"\0"` (every key from the prefix on) when there
/// is no such byte, as clientv3's `GetPrefixRangeEnd` answers.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: [&[u8]; 4] = [b"a", b"ab", b"b", b"c"];

    fn selected(range: KeyRange<'_>) -> Vec<&'static [u8]> {
        KEYS.into_iter().filter(|k| range.contains(k)).collect()
    }

    #[test]
    fn the_worked_example() {
        assert_eq!(selected(KeyRange::new(b"a", b"")), [b"a" as &[u8]]);
        assert_eq!(selected(KeyRange::new(b"a", b"c")), [b"a" as &[u8], b"ab", b"b"]);
        assert_eq!(selected(KeyRange::new(b"a", &prefix_end(b"a"))), [b"a" as &[u8], b"ab"]);
        assert_eq!(selected(KeyRange::new(b"b", b"\0")), [b"b" as &[u8], b"c"]);
        assert_eq!(selected(KeyRange::new(b"\0", b"\0")), KEYS);
        assert_eq!(selected(KeyRange::new(b"c", b"a")), Vec::<&[u8]>::new());
        assert!(KeyRange::new(b"c", b"a").is_empty());
        assert!(KeyRange::new(b"c", b"c").is_empty());
        assert!(!KeyRange::new(b"c", b"").is_empty());
        assert!(!KeyRange::new(b"c", b"\0").is_empty());
    }

    #[test]
    fn prefix_ends_match_clientv3() {
        assert_eq!(prefix_end(b"abc"), b"abd");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"a\xfe\xff"), b"a\xff");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }
}
