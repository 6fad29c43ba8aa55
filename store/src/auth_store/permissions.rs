//! A user's permissions in the shape the checks ask them: every key range the user's roles
//! grant, READ and WRITE apart, merged into sorted disjoint intervals (etcd's range permission
//! cache, `unifiedRangePermissions`).
//!
//! A request's range is permitted when one merged interval covers all of it. Merging first is
//! what lets two grants that touch add up: with `[a, c)` and `[c, f)` granted, a read of
//! `[b, e)` is allowed, as on etcd, though neither grant alone covers it.
//!
//! ```text
//!   grants     [a────c)[c──────f)      [k]          [x──────────∞
//!   merged     [a──────────────f)      [k, k\0)     [x──────────∞
//!   [b, e)       ✓ (inside [a, f))
//!   [e, h)                 ✗ (f < h: the part [f, h) is granted by nobody)
//!   key k                              ✓
//!   from y (y > x)                                    ✓
//! ```
//!
//! A single-key grant `k` is the interval `[k, k\0)`: `k\0` (k followed by one zero byte) is the
//! first key after `k`, so the interval holds `k` alone. A range end of `\0` is unbounded.

use actcd_proto::authpb::permission::Type as PermType;
use actcd_proto::authpb::Permission;
use actcd_proto::key_range::KeyRange;

/// The exclusive end of a merged interval.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    Before(Vec<u8>),
    Unbounded,
}

/// Sorted, disjoint, non-adjacent intervals `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Intervals(Vec<(Vec<u8>, End)>);

impl Intervals {
    fn from_grants<'a>(grants: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        let mut all: Vec<(Vec<u8>, End)> = grants
            .filter_map(|(key, range_end)| match KeyRange::new(key, range_end) {
                KeyRange::Key(k) => Some((k.to_vec(), End::Before(successor(k)))),
                KeyRange::From(k) => Some((k.to_vec(), End::Unbounded)),
                KeyRange::Between(s, e) if s < e => Some((s.to_vec(), End::Before(e.to_vec()))),
                // [s, e) with s >= e grants nothing.
                KeyRange::Between(..) => None,
            })
            .collect();
        all.sort();
        let mut merged: Vec<(Vec<u8>, End)> = Vec::with_capacity(all.len());
        for (start, end) in all {
            match merged.last_mut() {
                // Overlapping or touching: the next starts at or before the current end.
                Some((_, last_end)) if reaches(last_end, &start) => {
                    if end > *last_end {
                        *last_end = end;
                    }
                }
                _ => merged.push((start, end)),
            }
        }
        Intervals(merged)
    }

    /// Whether one interval holds every key of `range`.
    fn covers(&self, range: KeyRange<'_>) -> bool {
        let (start, end) = match range {
            KeyRange::Key(k) => (k, End::Before(successor(k))),
            KeyRange::From(k) => (k, End::Unbounded),
            KeyRange::Between(s, e) => (s, End::Before(e.to_vec())),
        };
        // The last interval starting at or before `start` is the only candidate.
        let i = self.0.partition_point(|(s, _)| s.as_slice() <= start);
        match i.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some((_, last_end)) => match range {
                // An empty range asks for no key; etcd still wants its start permitted.
                KeyRange::Between(s, e) if s >= e => reaches_past(last_end, s),
                _ => *last_end >= end,
            },
            None => false,
        }
    }
}

/// The first key after `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// Whether an interval ending at `end` touches or overlaps one that starts at `start`.
fn reaches(end: &End, start: &[u8]) -> bool {
    match end {
        End::Unbounded => true,
        End::Before(e) => start <= e.as_slice(),
    }
}

/// Whether `key` is before `end`.
fn reaches_past(end: &End, key: &[u8]) -> bool {
    match end {
        End::Unbounded => true,
        End::Before(e) => key < e.as_slice(),
    }
}

/// What one user may read and write: the union of its roles' grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserPermissions {
    read: Intervals,
    write: Intervals,
}

/// What a request needs on a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Range, a txn compare, a watch, a prev_kv.
    Read,
    /// Put, DeleteRange, a lease revoke over the lease's keys.
    Write,
}

impl UserPermissions {
    /// The union of `grants` (the key permissions of every role a user holds).
    pub fn new<'a>(grants: impl IntoIterator<Item = &'a Permission> + Clone) -> Self {
        let of = |wanted: Access| {
            grants
                .clone()
                .into_iter()
                .filter(move |p| allows(p.perm_type, wanted))
                .map(|p| (p.key.as_ref(), p.range_end.as_ref()))
        };
        Self {
            read: Intervals::from_grants(of(Access::Read)),
            write: Intervals::from_grants(of(Access::Write)),
        }
    }

    /// Whether `access` on every key of `range` is granted.
    pub fn permits(&self, access: Access, range: KeyRange<'_>) -> bool {
        match access {
            Access::Read => self.read.covers(range),
            Access::Write => self.write.covers(range),
        }
    }
}

/// Whether a permission of type `perm_type` grants `access`.
fn allows(perm_type: i32, access: Access) -> bool {
    match PermType::try_from(perm_type) {
        Ok(PermType::Readwrite) => true,
        Ok(PermType::Read) => access == Access::Read,
        Ok(PermType::Write) => access == Access::Write,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(t: PermType, key: &str, end: &str) -> Permission {
        Permission { perm_type: t as i32, key: key.to_string().into(), range_end: end.to_string().into() }
    }

    fn reads(p: &UserPermissions, key: &str, end: &str) -> bool {
        p.permits(Access::Read, KeyRange::new(key.as_bytes(), end.as_bytes()))
    }

    #[test]
    fn touching_grants_add_up_and_a_gap_is_refused() {
        let p = UserPermissions::new(&[grant(PermType::Read, "a", "c"), grant(PermType::Read, "c", "f")]);
        assert!(reads(&p, "b", "e"), "[b, e) lies in the union [a, f)");
        assert!(reads(&p, "a", "f"));
        assert!(!reads(&p, "e", "h"), "[f, h) is granted by nobody");
        assert!(reads(&p, "c", ""), "a single key inside a range");
        assert!(!reads(&p, "f", ""), "the end is exclusive");
        assert!(!reads(&p, "0", "b"), "before the first grant");
        assert!(!p.permits(Access::Write, KeyRange::new(b"b", b"")), "READ grants no write");
    }

    #[test]
    fn a_key_grant_is_that_key_alone_and_a_from_grant_is_unbounded() {
        let p =
            UserPermissions::new(&[grant(PermType::Readwrite, "k", ""), grant(PermType::Write, "x", "\0")]);
        assert!(reads(&p, "k", ""));
        assert!(!reads(&p, "k0", ""), "k0 is after k");
        assert!(!reads(&p, "k", "l"), "[k, l) holds more than k");
        assert!(reads(&p, "k", "k\0"), "[k, k\\0) is exactly k");
        assert!(p.permits(Access::Write, KeyRange::new(b"y", b"\0")), "from y inside from x");
        assert!(p.permits(Access::Write, KeyRange::new(b"zz", b"zzz")));
        assert!(!p.permits(Access::Read, KeyRange::new(b"y", b"")), "WRITE grants no read");
        assert!(!p.permits(Access::Write, KeyRange::new(b"w", b"\0")), "from w starts before x");
    }

    #[test]
    fn every_key_and_no_grant() {
        let all = UserPermissions::new(&[grant(PermType::Read, "\0", "\0")]);
        assert!(reads(&all, "\0", "\0"));
        assert!(reads(&all, "anything", ""));
        assert!(!reads(&all, "", ""), "the empty key is before \\0");
        let none = UserPermissions::new(&[]);
        assert!(!reads(&none, "a", ""));
        let backwards = UserPermissions::new(&[grant(PermType::Read, "c", "a")]);
        assert_eq!(backwards, none, "[c, a) grants nothing");
    }
}
