//! etcd's watch guarantees as checks over the responses a stream received: ordered, unique,
//! atomic (one revision, one response), reliable (no revision missing), prev_kv equal to the
//! value before, bookmarkable (a progress revision bounds the events around it), and, given a
//! model of the store, exactly the model's events.

use std::collections::{HashMap, HashSet};

use actcd_proto::etcdserverpb::WatchResponse;
use actcd_proto::key_range::KeyRange;
use actcd_proto::mvccpb::event::EventType;
use actcd_proto::mvccpb::{Event, KeyValue};

use crate::history::show;

/// What one watch received: each event with the index of the response it came in.
#[derive(Clone, Debug, Default)]
pub struct Received {
    pub events: Vec<(usize, Event)>,
    /// The watch was canceled because its start revision was compacted.
    pub compacted: bool,
}

/// The responses of a stream, split by watch id (progress responses, watch id -1, carry no
/// events).
pub fn by_watch(responses: &[WatchResponse]) -> HashMap<i64, Received> {
    let mut out: HashMap<i64, Received> = HashMap::new();
    for (index, r) in responses.iter().enumerate() {
        let entry = out.entry(r.watch_id).or_default();
        entry.compacted |= r.compact_revision != 0;
        entry.events.extend(r.events.iter().map(|e| (index, e.clone())));
    }
    out
}

fn revision(e: &Event) -> i64 {
    e.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

fn key(e: &Event) -> &[u8] {
    e.kv.as_ref().map_or(&[][..], |kv| kv.key.as_ref())
}

fn describe(e: &Event) -> String {
    let kind = if e.r#type == EventType::Delete as i32 { "delete" } else { "put" };
    let value = e.kv.as_ref().map(|kv| show(&kv.value)).unwrap_or_default();
    let prev = e.prev_kv.as_ref().map(|kv| show(&kv.value));
    format!("{kind} {}={value} at {} (prev {prev:?})", show(key(e)), revision(e))
}

impl Received {
    /// The revisions seen, in order, once each.
    pub fn revisions(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.events.iter().map(|(_, e)| revision(e)).collect();
        out.dedup();
        out
    }

    /// Ordered and unique: revisions never go back, and a (revision, key) pair comes once.
    pub fn check_ordered_unique(&self) -> Result<(), String> {
        for pair in self.events.windows(2) {
            if revision(&pair[0].1) > revision(&pair[1].1) {
                return Err(format!("out of order: {} then {}", describe(&pair[0].1), describe(&pair[1].1)));
            }
        }
        let mut seen = HashSet::new();
        for (_, e) in &self.events {
            if !seen.insert((revision(e), key(e).to_vec())) {
                return Err(format!("duplicate event: {}", describe(e)));
            }
        }
        Ok(())
    }

    /// Atomic: the events of one revision arrive in one response.
    pub fn check_atomic(&self) -> Result<(), String> {
        let mut response_of: HashMap<i64, usize> = HashMap::new();
        for (index, e) in &self.events {
            if *response_of.entry(revision(e)).or_insert(*index) != *index {
                return Err(format!("revision {} split over responses", revision(e)));
            }
        }
        Ok(())
    }

    /// Reliable: every revision in `expected` is some event's revision.
    pub fn check_reliable(&self, expected: impl IntoIterator<Item = i64>) -> Result<(), String> {
        let seen: HashSet<i64> = self.events.iter().map(|(_, e)| revision(e)).collect();
        let mut missing: Vec<i64> = expected.into_iter().filter(|r| !seen.contains(r)).collect();
        missing.sort_unstable();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("revisions never watched: {missing:?}"))
        }
    }

    /// prev_kv of a watch that saw every event of its keys from the start: each is the
    /// key-value the watch last saw put for the key (none after a delete or before the first put).
    pub fn check_prev_kv(&self) -> Result<(), String> {
        let mut last: HashMap<Vec<u8>, Option<KeyValue>> = HashMap::new();
        for (_, e) in &self.events {
            let expected = last.get(key(e)).cloned().flatten();
            if e.prev_kv != expected {
                return Err(format!(
                    "prev_kv of {}: expected {:?}",
                    describe(e),
                    expected.map(|kv| show(&kv.value))
                ));
            }
            let now = if e.r#type == EventType::Delete as i32 { None } else { e.kv.clone() };
            last.insert(key(e).to_vec(), now);
        }
        Ok(())
    }

    /// Exactly `expected`, event by event (type, every key-value field, prev_kv).
    pub fn check_exact(&self, expected: &[Event]) -> Result<(), String> {
        self.check_prefix_of(expected)?;
        if self.events.len() < expected.len() {
            return Err(format!(
                "{} events missing, the first: {}",
                expected.len() - self.events.len(),
                describe(&expected[self.events.len()])
            ));
        }
        Ok(())
    }

    /// The first events of `expected`, ending at a revision boundary (what a watch whose
    /// server died received).
    pub fn check_prefix_of(&self, expected: &[Event]) -> Result<(), String> {
        for (i, (_, got)) in self.events.iter().enumerate() {
            match expected.get(i) {
                Some(want) if want == got => {}
                Some(want) => {
                    let at = revision(want).min(revision(got));
                    let of = |events: &mut dyn Iterator<Item = &Event>| {
                        events.filter(|e| revision(e) == at).map(describe).collect::<Vec<_>>().join("; ")
                    };
                    return Err(format!(
                        "event {i}: got {}, expected {}; at revision {at} got [{}], expected [{}]",
                        describe(got),
                        describe(want),
                        of(&mut self.events.iter().map(|(_, e)| e)),
                        of(&mut expected.iter())
                    ));
                }
                None => return Err(format!("event {i}: got {}, expected none", describe(got))),
            }
        }
        if let (Some((_, last)), Some(next)) = (self.events.last(), expected.get(self.events.len())) {
            if revision(next) == revision(last) {
                return Err(format!("revision {} cut short before {}", revision(last), describe(next)));
            }
        }
        Ok(())
    }
}

/// The events each revision made, as watches of every key with prev_kv saw them.
pub fn events_by_revision<'a>(watches: impl IntoIterator<Item = &'a Received>) -> HashMap<i64, Vec<Event>> {
    let mut out: HashMap<i64, Vec<Event>> = HashMap::new();
    for watch in watches {
        let mut of_watch: HashMap<i64, Vec<Event>> = HashMap::new();
        for (_, e) in &watch.events {
            of_watch.entry(revision(e)).or_default().push(e.clone());
        }
        out.extend(of_watch);
    }
    out
}

/// Bookmarkable: the progress response at `index` (revision `at`) comes after every event up
/// to `at` and before every event after it.
pub fn check_bookmark(responses: &[WatchResponse], index: usize, at: i64) -> Result<(), String> {
    let before = responses[..index].iter().flat_map(|r| &r.events).find(|e| revision(e) > at);
    let after = responses[index..].iter().flat_map(|r| &r.events).find(|e| revision(e) <= at);
    match (before, after) {
        (Some(e), _) => Err(format!("{} before the progress response at {at}", describe(e))),
        (_, Some(e)) => Err(format!("{} after the progress response at {at}", describe(e))),
        _ => Ok(()),
    }
}

/// The model's events a watch of [key, range_end) asking for prev_kv or not would get.
pub fn expected_events(all: &[Event], key: &[u8], range_end: &[u8], prev_kv: bool) -> Vec<Event> {
    let range = KeyRange::new(key, range_end);
    all.iter()
        .filter(|e| range.contains(self::key(e)))
        .map(|e| Event { prev_kv: if prev_kv { e.prev_kv.clone() } else { None }, ..e.clone() })
        .collect()
}
