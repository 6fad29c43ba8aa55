//! The linearizability checker. etcd's revisions make it fast: every write that changed the
//! store answers with its own revision, so the writes come totally ordered and the search a
//! general checker (Knossos, porcupine) does over interleavings shrinks to:
//!
//! 1. Rebuild the store revision by revision from the model: revision r is made by the one
//!    acknowledged write whose answer says r and that the model, applied at r - 1, answers the
//!    same way; every other call answered at r changed nothing and must equal the model at r
//!    (reads, and writes that found nothing to do: a delete of a missing key, a txn whose
//!    branch wrote nothing). A revision nobody acknowledged must be made by a write whose
//!    outcome is unknown (timed out, connection lost), each used at most once; which one is
//!    searched, with backtracking. Historical reads equal the model at the revision they ask.
//! 2. Real time: place every call at its revision (the write first, then the calls that saw
//!    it). The placement is a linearization iff no call returned before a call placed earlier
//!    was made: that catches stale reads (a read whose revision is older than a write
//!    acknowledged before it started), reads from the future and writes out of order.
//! 3. Compaction and revision errors: a read answered ErrCompacted needs a compaction past its
//!    revision made before it returned; a successful historical read must not be below a
//!    compaction acknowledged before it started or placed before it; ErrFutureRev needs the
//!    revision to have been unacknowledged when the read started.

use std::collections::{BTreeMap, HashMap, HashSet};

use actcd_proto::mvccpb::Event;

use crate::etcd_model::{without_headers, Model};
use crate::history::{Nanos, Op, Outcome, Request, NEVER};

/// What made a revision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Maker {
    /// An acknowledged write (index into the history).
    Acked(usize),
    /// A write whose outcome was unknown.
    Unknown(usize),
}

/// The checker's findings.
pub struct Verdict {
    /// Empty when the history is linearizable.
    pub violations: Vec<String>,
    /// The store the history built (for watch validation).
    pub model: Model,
    /// Calls whose answer was checked (acknowledged, or a definite etcd error).
    pub checked: usize,
    /// Writes with unknown outcome, and how many of them took effect.
    pub unknown: usize,
    /// Of the writes with unknown outcome, those the search found took effect.
    pub unknown_applied: usize,
}

/// Trials of the backtracking search before it gives up (a history with a few unknown writes
/// needs a few thousand).
const SEARCH_BUDGET: usize = 2_000_000;

/// Reported violations are capped; the count is not.
const MAX_REPORTED: usize = 20;

/// Checks `history` for linearizability against the model.
pub fn check(history: &[Op]) -> Verdict {
    check_with_hints(history, &HashMap::new())
}

/// `check`, where several writes of unknown outcome could have made a revision, trying first
/// the one whose events equal `hints` at that revision (what a watcher saw: etcd's robustness
/// tests resolve such writes from the WAL instead). A hint never makes a history pass: the
/// write is still checked against every acknowledged call.
pub fn check_with_hints(history: &[Op], hints: &HashMap<i64, Vec<Event>>) -> Verdict {
    let mut violations = Vec::new();
    let mut at: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    let mut unknown_writes = Vec::new();
    let mut checked = 0;
    for (i, op) in history.iter().enumerate() {
        match &op.outcome {
            Outcome::Ok(response) => {
                checked += 1;
                if response.revision() < 1 {
                    violations.push(format!("answer without a revision: {}", op.describe()));
                } else if !matches!(op.request, Request::Compact(_)) {
                    at.entry(response.revision()).or_default().push(i);
                }
            }
            Outcome::Compacted | Outcome::FutureRevision => checked += 1,
            Outcome::Unknown(_) if op.may_write() => unknown_writes.push(i),
            Outcome::Unknown(_) => {}
        }
    }
    let last = history
        .iter()
        .filter_map(|op| match &op.outcome {
            Outcome::Ok(r) => Some(r.revision()),
            _ => None,
        })
        .max()
        .unwrap_or(1);
    // earliest_return[r]: the first return among calls answered at revision r or later. A
    // write placed at r must have been called before it.
    let mut earliest_return = vec![NEVER; (last + 2) as usize];
    for op in history {
        if let Outcome::Ok(r) = &op.outcome {
            let h = r.revision().max(0) as usize;
            earliest_return[h] = earliest_return[h].min(op.ret);
        }
    }
    for r in (0..=last as usize).rev() {
        earliest_return[r] = earliest_return[r].min(earliest_return[r + 1]);
    }

    let search = Search {
        history,
        at: &at,
        unknown_writes: &unknown_writes,
        earliest_return: &earliest_return,
        hints,
    };
    let (model, makers) = match search.run(last) {
        Ok(found) => found,
        Err((model, reasons)) => {
            violations.extend(reasons);
            return Verdict { violations, model, checked, unknown: unknown_writes.len(), unknown_applied: 0 };
        }
    };
    let unknown_applied = makers.values().filter(|m| matches!(m, Maker::Unknown(_))).count();
    real_time_order(history, &makers, &mut violations);
    compactions(history, &earliest_return, &mut violations);
    if violations.len() > MAX_REPORTED {
        let more = violations.len() - MAX_REPORTED;
        violations.truncate(MAX_REPORTED);
        violations.push(format!("... and {more} more"));
    }
    Verdict { violations, model, checked, unknown: unknown_writes.len(), unknown_applied }
}

struct Search<'a> {
    history: &'a [Op],
    at: &'a BTreeMap<i64, Vec<usize>>,
    unknown_writes: &'a [usize],
    earliest_return: &'a [Nanos],
    hints: &'a HashMap<i64, Vec<Event>>,
}

/// A revision whose maker was chosen, with the candidates left to try if a later revision
/// cannot be explained.
struct Choice {
    candidates: Vec<Maker>,
    next: usize,
    made_by: Maker,
}

impl Search<'_> {
    /// Rebuilds the store revision by revision: the model and who made each revision, or the
    /// model where the search got furthest and why it could not go on.
    #[allow(clippy::type_complexity)]
    fn run(&self, last: i64) -> Result<(Model, BTreeMap<i64, Maker>), (Model, Vec<String>)> {
        let mut model = Model::new();
        if let Err(why) = self.check_unchanged(&mut model, 1, None) {
            return Err((model, vec![why]));
        }
        let mut stack: Vec<Choice> = Vec::new();
        let mut used: HashSet<usize> = HashSet::new();
        let mut pending: Option<(Vec<Maker>, usize)> = None;
        let mut deepest: (i64, Vec<String>) = (0, Vec::new());
        let mut trials = 0;
        loop {
            let r = model.revision() + 1;
            if r > last {
                let makers = stack.iter().enumerate().map(|(i, c)| (i as i64 + 2, c.made_by)).collect();
                return Ok((model, makers));
            }
            let (candidates, mut next) =
                pending.take().unwrap_or_else(|| (self.candidates(&mut model, r, &used), 0));
            let mut reasons = Vec::new();
            let mut chosen = None;
            while next < candidates.len() {
                trials += 1;
                let maker = candidates[next];
                next += 1;
                match self.try_maker(&mut model, r, maker) {
                    Ok(()) => {
                        chosen = Some(maker);
                        break;
                    }
                    Err(why) => reasons.push(why),
                }
            }
            if let Some(made_by) = chosen {
                if let Maker::Unknown(i) = made_by {
                    used.insert(i);
                }
                stack.push(Choice { candidates, next, made_by });
                continue;
            }
            if r > deepest.0 {
                if reasons.is_empty() {
                    reasons.push(format!(
                        "revision {r}: no acknowledged write made it and no write of unknown outcome can"
                    ));
                }
                reasons.extend(
                    self.at
                        .get(&r)
                        .into_iter()
                        .flatten()
                        .map(|&i| format!("  answered at revision {r}: {}", self.history[i].describe())),
                );
                deepest = (r, reasons);
            }
            // Step back to the last revision with another candidate.
            let Some(choice) = stack.pop() else { return Err((model, deepest.1)) };
            model.undo();
            if let Maker::Unknown(i) = choice.made_by {
                used.remove(&i);
            }
            if trials > SEARCH_BUDGET {
                deepest.1.push(format!("search gave up after {trials} trials"));
                return Err((model, deepest.1));
            }
            pending = Some((choice.candidates, choice.next));
        }
    }

    /// Who could make revision r: acknowledged writes answered at r that change the store;
    /// only if there is none, the unused writes of unknown outcome called in time.
    fn candidates(&self, model: &mut Model, r: i64, used: &HashSet<usize>) -> Vec<Maker> {
        // None if write i changes nothing at r, else whether it makes the hinted events.
        let hinted = |model: &mut Model, i: usize| {
            let (_, changed) = model.apply(&self.history[i].request);
            if !changed {
                return None;
            }
            let as_hinted = self.hints.get(&r).is_some_and(|events| events.as_slice() == model.events_of(r));
            model.undo();
            Some(as_hinted)
        };
        let acked: Vec<Maker> = self
            .at
            .get(&r)
            .into_iter()
            .flatten()
            .filter(|&&i| self.history[i].may_write() && hinted(model, i).is_some())
            .map(|&i| Maker::Acked(i))
            .collect();
        if acked.iter().any(|m| matches!(m, Maker::Acked(i) if self.answers_as_maker(model, *i).is_ok())) {
            return acked;
        }
        let deadline = self.earliest_return[r as usize];
        let mut unknown: Vec<(bool, usize)> = self
            .unknown_writes
            .iter()
            .filter(|&&i| !used.contains(&i) && self.history[i].call < deadline)
            .filter_map(|&i| Some((!hinted(model, i)?, i)))
            .collect();
        unknown.sort_unstable();
        let mut all = acked;
        all.extend(unknown.into_iter().map(|(_, i)| Maker::Unknown(i)));
        all
    }

    /// Applies acknowledged write `i` at the model's revision: Ok if it made a revision and
    /// answered as the model does (the model is left one revision on).
    fn answers_as_maker(&self, model: &mut Model, i: usize) -> Result<(), String> {
        let op = &self.history[i];
        let (expected, changed) = model.apply(&op.request);
        if !changed {
            return Err(format!(
                "{} changed nothing in the model at revision {}",
                op.describe(),
                model.revision()
            ));
        }
        model.undo();
        let Outcome::Ok(actual) = &op.outcome else { unreachable!("only acknowledged calls") };
        if without_headers(actual) != without_headers(&expected) {
            return Err(format!(
                "{}: answer differs from the model at revision {}:\n    got      {:?}\n    expected {:?}",
                op.describe(),
                model.revision(),
                without_headers(actual),
                without_headers(&expected)
            ));
        }
        Ok(())
    }

    /// Makes revision r with `maker` and checks every other call answered at r against it.
    fn try_maker(&self, model: &mut Model, r: i64, maker: Maker) -> Result<(), String> {
        let (i, acked) = match maker {
            Maker::Acked(i) => (i, true),
            Maker::Unknown(i) => (i, false),
        };
        if acked {
            self.answers_as_maker(model, i)?;
        }
        let (_, changed) = model.apply(&self.history[i].request);
        if !changed {
            return Err(format!("{} changes nothing at revision {}", self.history[i].describe(), r - 1));
        }
        if let Err(why) = self.check_unchanged(model, r, Some(i)) {
            model.undo();
            return Err(why);
        }
        Ok(())
    }

    /// Every call answered at revision r, except its maker, must leave the store as it is and
    /// answer as the model at r.
    fn check_unchanged(&self, model: &mut Model, r: i64, maker: Option<usize>) -> Result<(), String> {
        for &i in self.at.get(&r).into_iter().flatten() {
            if Some(i) == maker {
                continue;
            }
            let op = &self.history[i];
            if let Request::Range(range) = &op.request {
                if range.revision > r {
                    return Err(format!(
                        "{}: read revision {} above its own revision {r}",
                        op.describe(),
                        range.revision
                    ));
                }
            }
            let (expected, changed) = model.apply(&op.request);
            if changed {
                model.undo();
                return Err(format!(
                    "{}: answered at revision {r} without making a revision, but it changes the store there",
                    op.describe()
                ));
            }
            let Outcome::Ok(actual) = &op.outcome else { unreachable!("only acknowledged calls") };
            if without_headers(actual) != without_headers(&expected) {
                return Err(format!(
                    "{}: answer differs from the model at revision {r}:\n    got      {:?}\n    expected {:?}",
                    op.describe(),
                    without_headers(actual),
                    without_headers(&expected)
                ));
            }
        }
        Ok(())
    }
}

/// Places every acknowledged call at its revision (its maker first, then everything answered
/// at it, in any order) and every applied unknown write at the revision it made; a call that
/// returned before a call placed earlier was made breaks real time.
fn real_time_order(history: &[Op], makers: &BTreeMap<i64, Maker>, violations: &mut Vec<String>) {
    let maker_of: HashMap<usize, i64> = makers
        .iter()
        .map(|(r, m)| match m {
            Maker::Acked(i) | Maker::Unknown(i) => (*i, *r),
        })
        .collect();
    // (revision, 0 = maker / 1 = answered at it, index)
    let mut placed: Vec<(i64, u8, usize)> = Vec::new();
    for (i, op) in history.iter().enumerate() {
        if let Some(&r) = maker_of.get(&i) {
            placed.push((r, 0, i));
        } else if let Outcome::Ok(response) = &op.outcome {
            placed.push((response.revision(), 1, i));
        }
    }
    placed.sort_unstable();
    // The latest call among the makers placed so far, and among all calls placed so far: a
    // maker is named first when both were made after a call returned, as the likelier culprit.
    let mut latest_maker: Option<(Nanos, usize)> = None;
    let mut latest_any: Option<(Nanos, usize)> = None;
    let later = |latest: Option<(Nanos, usize)>, ret: Nanos| latest.filter(|&(call, _)| ret < call);
    let mut group_start = 0;
    while group_start < placed.len() {
        let key = (placed[group_start].0, placed[group_start].1);
        let group_end = placed[group_start..]
            .iter()
            .position(|p| (p.0, p.1) != key)
            .map_or(placed.len(), |n| group_start + n);
        for &(r, role, b) in &placed[group_start..group_end] {
            let ret = history[b].ret;
            let Some((_, a)) = later(latest_maker, ret).or(later(latest_any, ret)) else { continue };
            let earlier = &history[a];
            let (ra, earlier_role) = match maker_of.get(&a) {
                Some(&ra) => (ra, 0),
                None => (response_revision(earlier), 1),
            };
            let kind = match (earlier_role, role) {
                (1, 0) => "stale read",
                (0, 1) => "read from the future",
                (0, 0) => "writes out of real-time order",
                _ => "reads out of real-time order",
            };
            violations.push(format!(
                "{kind}: {} (revision {r}) returned before {} (revision {ra}) was called",
                history[b].describe(),
                earlier.describe()
            ));
        }
        for &(_, role, i) in &placed[group_start..group_end] {
            let call = history[i].call;
            if latest_any.is_none_or(|(c, _)| call > c) {
                latest_any = Some((call, i));
            }
            if role == 0 && latest_maker.is_none_or(|(c, _)| call > c) {
                latest_maker = Some((call, i));
            }
        }
        group_start = group_end;
    }
}

fn response_revision(op: &Op) -> i64 {
    match &op.outcome {
        Outcome::Ok(r) => r.revision(),
        _ => 0,
    }
}

/// ErrCompacted and ErrFutureRev answers, and historical reads, against the compactions.
fn compactions(history: &[Op], earliest_return: &[Nanos], violations: &mut Vec<String>) {
    let compactions: Vec<(usize, i64)> = history
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match &op.request {
            Request::Compact(c) if matches!(op.outcome, Outcome::Ok(_) | Outcome::Unknown(_)) => {
                Some((i, c.revision))
            }
            _ => None,
        })
        .collect();
    let acked = |i: usize| matches!(history[i].outcome, Outcome::Ok(_));
    for (i, op) in history.iter().enumerate() {
        let asked = match &op.request {
            Request::Range(r) if r.revision > 0 => r.revision,
            Request::Compact(c) => c.revision,
            _ => continue,
        };
        let is_compaction = matches!(op.request, Request::Compact(_));
        // A compaction to C refuses revisions below C (a compaction: up to C).
        let covers = |c: i64| if is_compaction { c >= asked } else { c > asked };
        match &op.outcome {
            Outcome::Ok(response) => {
                let h = response.revision();
                if is_compaction && asked > h {
                    violations.push(format!("{}: compacted beyond the current revision", op.describe()));
                }
                let before = compactions.iter().find(|&&(j, c)| {
                    j != i && acked(j) && covers(c) && {
                        let other = &history[j];
                        other.ret < op.call || (!is_compaction && response_revision(other) < h)
                    }
                });
                if let Some(&(j, _)) = before {
                    violations.push(format!(
                        "{}: should have been ErrCompacted after {}",
                        op.describe(),
                        history[j].describe()
                    ));
                }
            }
            Outcome::Compacted => {
                let cause = compactions.iter().any(|&(j, c)| j != i && covers(c) && history[j].call < op.ret);
                if !cause {
                    violations.push(format!("{}: ErrCompacted without a compaction past it", op.describe()));
                }
            }
            Outcome::FutureRevision if !is_compaction => {
                let r = asked as usize;
                if r < earliest_return.len() && earliest_return[r] < op.call {
                    violations.push(format!(
                        "{}: ErrFutureRev although revision {asked} was answered before it was called",
                        op.describe()
                    ));
                }
            }
            _ => {}
        }
    }
}
