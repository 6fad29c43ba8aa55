//! A simulated server that is linearizable by construction, for testing the checker without a
//! server: clients make overlapping calls on a simulated clock; each call takes effect on the
//! model (plus a compacted revision) at one instant between its call and its return. Some calls
//! time out: the client records an unknown outcome and moves on, and the call takes effect or
//! not.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::history::{Nanos, Op, Outcome, Request, NEVER};
use crate::history_workload::{Rng, Workload};
use actcd_test_support::etcd_model::Model;

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Call(usize),
    Apply(usize),
    Return(usize),
}

struct InFlight {
    client: usize,
    call: Nanos,
    request: Request,
    outcome: Option<Outcome>,
    timed_out: bool,
}

/// The store the simulation serves from.
struct Server {
    model: Model,
    compacted: i64,
}

impl Server {
    fn serve(&mut self, request: &Request) -> Outcome {
        match request {
            Request::Range(r) if r.revision > self.model.revision() => return Outcome::FutureRevision,
            Request::Range(r) if r.revision > 0 && r.revision < self.compacted => return Outcome::Compacted,
            Request::Compact(c) if c.revision <= self.compacted => return Outcome::Compacted,
            Request::Compact(c) if c.revision > self.model.revision() => return Outcome::FutureRevision,
            Request::Compact(c) => self.compacted = c.revision,
            _ => {}
        }
        Outcome::Ok(self.model.apply(request).0)
    }
}

/// A history of `clients` clients making `calls` calls each; `seed` picks everything.
pub fn simulated_history(seed: u64, clients: usize, calls: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut workloads: Vec<Workload> = (0..clients).map(|c| Workload::new(c, seed)).collect();
    let mut made = vec![0; clients];
    let mut server = Server { model: Model::new(), compacted: 0 };
    let mut in_flight: Vec<InFlight> = Vec::new();
    // By time, then in the order scheduled.
    let mut queue: BinaryHeap<Reverse<(Nanos, u64, Step)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut schedule = |queue: &mut BinaryHeap<_>, at: Nanos, step: Step| {
        order += 1;
        queue.push(Reverse((at, order, step)));
    };
    for c in 0..clients {
        schedule(&mut queue, rng.below(1000), Step::Call(c));
    }
    let mut history = Vec::new();
    while let Some(Reverse((now, _, step))) = queue.pop() {
        match step {
            Step::Call(client) => {
                if made[client] == calls {
                    continue;
                }
                made[client] += 1;
                let workload = &mut workloads[client];
                let request = if rng.percent(4) {
                    workload.compaction(workload.seen_revision - 20)
                } else {
                    workload.next_call()
                };
                let timed_out = rng.percent(2);
                in_flight.push(InFlight { client, call: now, request, outcome: None, timed_out });
                let i = in_flight.len() - 1;
                if !timed_out || rng.percent(50) {
                    schedule(&mut queue, now + 1 + rng.below(2000), Step::Apply(i));
                }
                if timed_out {
                    let f = &in_flight[i];
                    let outcome = Outcome::Unknown("timed out".into());
                    history.push(Op { client, call: now, ret: NEVER, request: f.request.clone(), outcome });
                    schedule(&mut queue, now + 1 + rng.below(3000), Step::Call(client));
                }
            }
            Step::Apply(index) => {
                let outcome = server.serve(&in_flight[index].request);
                if !in_flight[index].timed_out {
                    in_flight[index].outcome = Some(outcome);
                    schedule(&mut queue, now + 1 + rng.below(2000), Step::Return(index));
                }
            }
            Step::Return(index) => {
                let f = &in_flight[index];
                let outcome = f.outcome.clone().unwrap_or_else(|| Outcome::Unknown("lost".into()));
                workloads[f.client].observe(&outcome);
                history.push(Op {
                    client: f.client,
                    call: f.call,
                    ret: now,
                    request: f.request.clone(),
                    outcome,
                });
                schedule(&mut queue, now + 1 + rng.below(1000), Step::Call(f.client));
            }
        }
    }
    history
}
