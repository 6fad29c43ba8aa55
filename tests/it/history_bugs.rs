//! Known bugs injected into histories that pass, to show the checkers catch them: a stale
//! read, a read from the future, a lost write, swapped and duplicated revisions, a wrong
//! prev_kv, a txn that took the wrong branch, a wrong delete count, a phantom ErrCompacted;
//! and in watch responses a duplicated, a dropped and a split event and a wrong prev_kv.

use bytes::Bytes;

use actcd_proto::etcdserverpb::{RangeRequest, ResponseHeader, WatchResponse};
use actcd_proto::mvccpb::Event;

use crate::history::{Op, Outcome, Request, Response};
use crate::history_check::check;
use crate::history_simulated::simulated_history;
use crate::watch_validator::{by_watch, Received};
use actcd_test_support::etcd_model::Model;

/// A history bug: its name, the word its report must contain ("" = any report), and how to
/// inject it (`None` when the history has no place for it).
pub type HistoryBug = (&'static str, &'static str, fn(&[Op], &Model) -> Option<Vec<Op>>);

pub const HISTORY_BUGS: [HistoryBug; 9] = [
    ("stale read", "stale read", stale_read),
    ("read from the future", "read from the future", future_read),
    ("lost write", "", lost_write),
    ("swapped revisions", "", swapped_revisions),
    ("duplicate revision", "", duplicate_revision),
    ("wrong prev_kv", "", wrong_prev_kv),
    ("txn took the wrong branch", "", wrong_branch),
    ("wrong delete count", "", wrong_delete_count),
    ("phantom ErrCompacted", "ErrCompacted without", phantom_compacted),
];

fn acked(op: &Op) -> Option<&Response> {
    match &op.outcome {
        Outcome::Ok(r) => Some(r),
        _ => None,
    }
}

fn is_latest_read(op: &Op) -> bool {
    matches!(&op.request, Request::Range(r) if r.revision == 0 && r.range_end.is_empty())
        && acked(op).is_some()
}

fn is_put(op: &Op) -> bool {
    matches!(op.request, Request::Put(_)) && acked(op).is_some()
}

fn revision(op: &Op) -> i64 {
    acked(op).map_or(0, Response::revision)
}

/// The model's answer to a read of `op`'s range at revision `at`, answered at `at`.
fn read_at(model: &Model, op: &Op, at: i64) -> Outcome {
    let Request::Range(r) = &op.request else { unreachable!("reads only") };
    let mut response = model.clone().apply(&Request::Range(RangeRequest { revision: at, ..r.clone() })).0;
    if let Response::Range(r) = &mut response {
        r.header = Some(ResponseHeader { revision: at, ..Default::default() });
    }
    Outcome::Ok(response)
}

/// A read made after a put returned answers at the revision before the put, with that
/// revision's data.
fn stale_read(history: &[Op], model: &Model) -> Option<Vec<Op>> {
    let (b, a) = history.iter().enumerate().filter(|(_, op)| is_latest_read(op)).find_map(|(b, read)| {
        let a =
            history.iter().position(|w| is_put(w) && w.ret < read.call && revision(w) <= revision(read))?;
        Some((b, a))
    })?;
    let mut out = history.to_vec();
    out[b].outcome = read_at(model, &history[b], revision(&history[a]) - 1);
    Some(out)
}

/// A read answers at the revision of a put that was made after the read returned.
fn future_read(history: &[Op], model: &Model) -> Option<Vec<Op>> {
    let (b, a) = history.iter().enumerate().filter(|(_, op)| is_latest_read(op)).find_map(|(b, read)| {
        let a =
            history.iter().position(|w| is_put(w) && w.call > read.ret && revision(w) > revision(read))?;
        Some((b, a))
    })?;
    let mut out = history.to_vec();
    out[b].outcome = read_at(model, &history[b], revision(&history[a]));
    Some(out)
}

/// A read of a key after a put to it returned shows the value from before the put.
fn lost_write(history: &[Op], model: &Model) -> Option<Vec<Op>> {
    let b = history.iter().position(|read| {
        is_latest_read(read)
            && matches!(acked(read), Some(Response::Range(r)) if r.kvs.first().is_some_and(|kv| {
                history.iter().any(|w| is_put(w) && revision(w) == kv.mod_revision && w.ret < read.call)
            }))
    })?;
    let mut out = history.to_vec();
    let Some(Response::Range(r)) = acked(&history[b]) else { unreachable!() };
    let Outcome::Ok(Response::Range(before)) = read_at(model, &history[b], r.kvs[0].mod_revision - 1) else {
        unreachable!()
    };
    if let Outcome::Ok(Response::Range(lost)) = &mut out[b].outcome {
        lost.kvs = before.kvs;
        lost.count = before.count;
    }
    Some(out)
}

fn set_revision(op: &mut Op, revision: i64) {
    if let Outcome::Ok(Response::Put(p)) = &mut op.outcome {
        p.header = Some(ResponseHeader { revision, ..Default::default() });
    }
}

/// Two puts, one returned before the other was called, answer with each other's revision.
fn swapped_revisions(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let (a, b) = history.iter().enumerate().filter(|(_, op)| is_put(op)).find_map(|(a, first)| {
        let b =
            history.iter().position(|w| is_put(w) && first.ret < w.call && revision(first) < revision(w))?;
        Some((a, b))
    })?;
    let mut out = history.to_vec();
    set_revision(&mut out[a], revision(&history[b]));
    set_revision(&mut out[b], revision(&history[a]));
    Some(out)
}

/// Two puts answer with the same revision.
fn duplicate_revision(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let a = history.iter().position(is_put)?;
    let b = history.iter().position(|w| is_put(w) && revision(w) != revision(&history[a]))?;
    let mut out = history.to_vec();
    set_revision(&mut out[b], revision(&history[a]));
    Some(out)
}

/// A put's prev_kv carries a value the key never had.
fn wrong_prev_kv(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let i = history
        .iter()
        .position(|op| matches!(&op.outcome, Outcome::Ok(Response::Put(p)) if p.prev_kv.is_some()))?;
    let mut out = history.to_vec();
    if let Outcome::Ok(Response::Put(p)) = &mut out[i].outcome {
        if let Some(kv) = &mut p.prev_kv {
            kv.value = Bytes::from_static(b"never written");
        }
    }
    Some(out)
}

/// A txn reports the other branch.
fn wrong_branch(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let i = history.iter().position(|op| matches!(&op.outcome, Outcome::Ok(Response::Txn(_))))?;
    let mut out = history.to_vec();
    if let Outcome::Ok(Response::Txn(t)) = &mut out[i].outcome {
        t.succeeded = !t.succeeded;
    }
    Some(out)
}

/// A delete reports one key more than it deleted.
fn wrong_delete_count(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let i = history
        .iter()
        .position(|op| matches!(&op.outcome, Outcome::Ok(Response::Delete(d)) if d.deleted > 0))?;
    let mut out = history.to_vec();
    if let Outcome::Ok(Response::Delete(d)) = &mut out[i].outcome {
        d.deleted += 1;
    }
    Some(out)
}

/// A historical read at or above every compaction made before it returned answers ErrCompacted.
fn phantom_compacted(history: &[Op], _: &Model) -> Option<Vec<Op>> {
    let compactions: Vec<&Op> =
        history.iter().filter(|op| matches!(op.request, Request::Compact(_))).collect();
    let i = history.iter().position(|op| match &op.request {
        Request::Range(r) if r.revision > 0 && acked(op).is_some() => compactions.iter().all(|c| {
            let Request::Compact(compact) = &c.request else { unreachable!() };
            compact.revision <= r.revision || c.call > op.ret
        }),
        _ => false,
    })?;
    let mut out = history.to_vec();
    out[i].outcome = Outcome::Compacted;
    Some(out)
}

/// Injects every history bug, one at a time, into `history` (which must pass): each bug's name
/// and the first line of the checker's report, `None` if it missed the bug. Panics if the
/// history has no place for one.
pub fn injected_history_bugs(history: &[Op], model: &Model) -> Vec<(&'static str, Option<String>)> {
    HISTORY_BUGS
        .iter()
        .map(|(name, word, inject)| {
            let buggy =
                inject(history, model).unwrap_or_else(|| panic!("no place in the history for: {name}"));
            let verdict = check(&buggy);
            let caught = verdict.violations.iter().any(|v| v.contains(word));
            let report = verdict.violations.first().filter(|_| caught);
            (*name, report.map(|r| r.lines().next().unwrap_or_default().to_string()))
        })
        .collect()
}

/// A watch bug: its name, how to inject it into the responses of a watch, and which check
/// must then fail.
pub type WatchBug =
    (&'static str, fn(&mut Vec<WatchResponse>), fn(&Received, &[Event]) -> Result<(), String>);

pub const WATCH_BUGS: [WatchBug; 5] = [
    ("duplicated event", duplicate_event, |r, _| r.check_ordered_unique()),
    ("dropped event", drop_event, |r, e| r.check_exact(e)),
    ("revision split over two responses", split_revision, |r, _| r.check_atomic()),
    ("wrong prev_kv", wrong_watch_prev_kv, |r, _| r.check_prev_kv()),
    ("responses out of order", swap_responses, |r, _| r.check_ordered_unique()),
];

// Every watch bug has the signature of the one that must insert a response.
#[allow(clippy::ptr_arg)]
fn duplicate_event(responses: &mut Vec<WatchResponse>) {
    let (i, event) =
        responses.iter().enumerate().find_map(|(i, r)| Some((i, r.events.first()?.clone()))).unwrap();
    responses[i + 1].events.insert(0, event);
}

// Every watch bug has the signature of the one that must insert a response.
#[allow(clippy::ptr_arg)]
fn drop_event(responses: &mut Vec<WatchResponse>) {
    let middle = responses.len() / 2;
    let r = responses[middle..].iter_mut().find(|r| !r.events.is_empty()).unwrap();
    r.events.remove(0);
}

fn split_revision(responses: &mut Vec<WatchResponse>) {
    // The last two events of the response must share a revision: a response may carry several
    // revisions (catch-up), and moving out a revision of its own splits nothing.
    let revision = |e: &Event| e.kv.as_ref().map(|kv| kv.mod_revision);
    let i = responses
        .iter()
        .position(|r| matches!(r.events[..], [.., ref a, ref b] if revision(a) == revision(b)))
        .expect("a revision with two events");
    let last = responses[i].events.pop();
    let split = WatchResponse { events: last.into_iter().collect(), ..responses[i].clone() };
    responses.insert(i + 1, split);
}

// Every watch bug has the signature of the one that must insert a response.
#[allow(clippy::ptr_arg)]
fn wrong_watch_prev_kv(responses: &mut Vec<WatchResponse>) {
    let e = responses.iter_mut().flat_map(|r| &mut r.events).find(|e| e.prev_kv.is_some()).unwrap();
    if let Some(kv) = &mut e.prev_kv {
        kv.value = Bytes::from_static(b"never written");
    }
}

// Every watch bug has the signature of the one that must insert a response.
#[allow(clippy::ptr_arg)]
fn swap_responses(responses: &mut Vec<WatchResponse>) {
    let i = responses.iter().position(|r| !r.events.is_empty()).unwrap();
    let j = i + 1 + responses[i + 1..].iter().position(|r| !r.events.is_empty()).unwrap();
    responses.swap(i, j);
}

/// Injects every watch bug into the responses of `watch_id` (which must pass) and returns the
/// names of those its check missed.
pub fn missed_watch_bugs(
    responses: &[WatchResponse],
    watch_id: i64,
    expected: &[Event],
) -> Vec<&'static str> {
    let mut missed = Vec::new();
    let own: Vec<WatchResponse> = responses.iter().filter(|r| r.watch_id == watch_id).cloned().collect();
    for (name, inject, check) in WATCH_BUGS {
        let mut buggy = own.clone();
        inject(&mut buggy);
        let received = by_watch(&buggy).remove(&watch_id).unwrap_or_default();
        if check(&received, expected).is_ok() {
            missed.push(name);
        }
    }
    missed
}

/// One response per revision, as a watch of every key from revision 1 with prev_kv gets them.
pub fn watch_responses_of(model: &Model, watch_id: i64) -> Vec<WatchResponse> {
    (2..=model.revision())
        .map(|r| WatchResponse { watch_id, events: model.events_of(r).to_vec(), ..Default::default() })
        .collect()
}

#[test]
fn simulated_histories_pass_and_every_injected_bug_is_caught() {
    let mut calls = 0;
    let mut unknown = 0;
    for seed in 1..=6 {
        let history = simulated_history(seed, 6, 300);
        let verdict = check(&history);
        assert!(
            verdict.violations.is_empty(),
            "seed {seed}: a linearizable history failed: {:#?}",
            verdict.violations
        );
        calls += verdict.checked;
        unknown += verdict.unknown;
        let missed: Vec<_> = injected_history_bugs(&history, &verdict.model)
            .into_iter()
            .filter_map(|(name, report)| report.is_none().then_some(name))
            .collect();
        assert!(missed.is_empty(), "seed {seed}: the checker missed {missed:?}");

        let expected = verdict.model.events_from(1);
        let responses = watch_responses_of(&verdict.model, 7);
        let received = by_watch(&responses).remove(&7).unwrap();
        received.check_exact(&expected).unwrap();
        received.check_atomic().unwrap();
        received.check_ordered_unique().unwrap();
        received.check_prev_kv().unwrap();
        let missed = missed_watch_bugs(&responses, 7, &expected);
        assert!(missed.is_empty(), "seed {seed}: the watch validator missed {missed:?}");
    }
    eprintln!(
        "simulated histories: 6 seeds, {calls} calls checked ({unknown} of unknown outcome), {} history bugs and {} watch bugs caught in each",
        HISTORY_BUGS.len(),
        WATCH_BUGS.len()
    );
}
