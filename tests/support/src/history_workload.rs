//! The calls a linearizability client makes: puts, reads at the latest and at past revisions,
//! txns with compares on value, version, create and mod revision, single and range deletes,
//! over a dozen keys so that clients collide. Values are unique per call, so any read names
//! the write it saw. Compares aim at what the client last saw, so both branches run.

use std::collections::HashMap;

use bytes::Bytes;

use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::{
    request_op, response_op, CompactionRequest, Compare, DeleteRangeRequest, PutRequest, RangeRequest,
    RequestOp,
};
use actcd_proto::mvccpb::KeyValue;

use crate::history::{Outcome, Request, Response};

/// Keys `k/00` .. `k/11`.
pub const KEYS: u64 = 12;

/// The prefix every key shares, and its range end.
pub const PREFIX: &str = "k/";
/// The end of the range of [`PREFIX`].
pub const PREFIX_END: &str = "k0";

/// Key number `i`.
pub fn key(i: u64) -> Bytes {
    Bytes::from(format!("k/{i:02}"))
}

/// splitmix64: small, seedable, good enough to pick calls.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One client's calls.
pub struct Workload {
    client: usize,
    seq: u64,
    rng: Rng,
    /// The newest revision this client saw in an answer.
    pub seen_revision: i64,
    /// The last key-value it saw per key.
    seen: HashMap<Bytes, KeyValue>,
}

impl Workload {
    /// The calls of client `client`, from a generator seeded with `seed` and the client.
    pub fn new(client: usize, seed: u64) -> Self {
        Workload {
            client,
            seq: 0,
            rng: Rng::new(seed ^ (client as u64) << 32),
            seen_revision: 1,
            seen: HashMap::new(),
        }
    }

    fn value(&self, part: usize) -> Bytes {
        Bytes::from(format!("c{}-{}-{part}", self.client, self.seq))
    }

    fn any_key(&mut self) -> Bytes {
        key(self.rng.below(KEYS))
    }

    /// The next call.
    pub fn next_call(&mut self) -> Request {
        self.seq += 1;
        let roll = self.rng.below(100);
        match roll {
            0..=29 => Request::Put(self.put(0)),
            30..=47 => Request::Range(self.latest_range()),
            48..=59 => {
                // Mostly a few revisions back; sometimes anywhere in the past (often below
                // the compactions), sometimes ahead (often not made yet).
                let revision = match self.rng.below(10) {
                    0 => 1 + self.rng.below(self.seen_revision as u64) as i64,
                    1 => self.seen_revision + 3,
                    _ => self.seen_revision - self.rng.below(60) as i64,
                };
                Request::Range(RangeRequest { revision: revision.max(1), ..self.latest_range() })
            }
            60..=79 => Request::Txn(self.txn()),
            80..=91 => Request::Delete(DeleteRangeRequest {
                key: self.any_key(),
                prev_kv: self.rng.percent(50),
                ..Default::default()
            }),
            _ => {
                let first = self.rng.below(KEYS - 3);
                Request::Delete(DeleteRangeRequest {
                    key: key(first),
                    range_end: key(first + 3),
                    prev_kv: self.rng.percent(50),
                })
            }
        }
    }

    /// A count of every key, at the latest revision: what a compactor reads to learn the
    /// revision it will compact to a few rounds later.
    pub fn count_all() -> Request {
        Request::Range(RangeRequest {
            key: PREFIX.into(),
            range_end: PREFIX_END.into(),
            count_only: true,
            ..Default::default()
        })
    }

    /// A compaction to `revision` (at least 1).
    pub fn compaction(&mut self, revision: i64) -> Request {
        Request::Compact(CompactionRequest { revision: revision.max(1), physical: self.rng.percent(50) })
    }

    fn put(&mut self, part: usize) -> PutRequest {
        PutRequest {
            key: self.any_key(),
            value: self.value(part),
            prev_kv: self.rng.percent(50),
            ..Default::default()
        }
    }

    fn latest_range(&mut self) -> RangeRequest {
        match self.rng.below(10) {
            0..=6 => RangeRequest { key: self.any_key(), ..Default::default() },
            7 => RangeRequest { key: PREFIX.into(), range_end: PREFIX_END.into(), ..Default::default() },
            _ => {
                let first = self.rng.below(KEYS - 4);
                RangeRequest { key: key(first), range_end: key(first + 4), limit: 2, ..Default::default() }
            }
        }
    }

    fn compare_on(&mut self, target_key: &Bytes) -> Compare {
        let seen = self.seen.get(target_key).cloned().unwrap_or_default();
        let nudge = if self.rng.percent(70) { 0 } else { self.rng.below(3) as i64 - 1 };
        let (target, union) = match self.rng.below(4) {
            0 => (
                CompareTarget::Value,
                TargetUnion::Value(if nudge == 0 { seen.value } else { self.value(9) }),
            ),
            1 => (CompareTarget::Version, TargetUnion::Version(seen.version + nudge)),
            2 => (CompareTarget::Create, TargetUnion::CreateRevision(seen.create_revision + nudge)),
            _ => (CompareTarget::Mod, TargetUnion::ModRevision(seen.mod_revision + nudge)),
        };
        let result = match self.rng.below(10) {
            0..=6 => CompareResult::Equal,
            7 => CompareResult::NotEqual,
            8 => CompareResult::Greater,
            _ => CompareResult::Less,
        };
        Compare {
            result: result as i32,
            target: target as i32,
            key: target_key.clone(),
            range_end: Bytes::new(),
            target_union: Some(union),
        }
    }

    fn txn(&mut self) -> actcd_proto::etcdserverpb::TxnRequest {
        let index = self.rng.below(KEYS);
        let a = key(index);
        let compare = vec![self.compare_on(&a)];
        let op = |r: request_op::Request| RequestOp { request: Some(r) };
        // Another key than `a`: etcd refuses a txn that writes one key twice.
        let other = |rng: &mut Rng| key((index + 1 + rng.below(KEYS - 1)) % KEYS);
        let read_a =
            op(request_op::Request::RequestRange(RangeRequest { key: a.clone(), ..Default::default() }));
        if self.rng.percent(10) {
            // Read-only: no revision whichever branch runs.
            let all = RangeRequest { key: PREFIX.into(), range_end: PREFIX_END.into(), ..Default::default() };
            return actcd_proto::etcdserverpb::TxnRequest {
                compare,
                success: vec![read_a.clone(), op(request_op::Request::RequestRange(all))],
                failure: vec![read_a],
            };
        }
        let mut success = vec![op(request_op::Request::RequestPut(PutRequest {
            key: a.clone(),
            value: self.value(1),
            prev_kv: true,
            ..Default::default()
        }))];
        let b = other(&mut self.rng);
        match self.rng.below(3) {
            0 => success.push(op(request_op::Request::RequestPut(PutRequest {
                key: b,
                value: self.value(2),
                ..Default::default()
            }))),
            1 => success.push(op(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: b,
                prev_kv: true,
                ..Default::default()
            }))),
            _ => success.push(op(request_op::Request::RequestRange(RangeRequest {
                key: PREFIX.into(),
                range_end: PREFIX_END.into(),
                ..Default::default()
            }))),
        }
        let mut failure = vec![read_a];
        if self.rng.percent(30) {
            let c = other(&mut self.rng);
            failure.push(op(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: c,
                ..Default::default()
            })));
        }
        actcd_proto::etcdserverpb::TxnRequest { compare, success, failure }
    }

    /// Learns from an answer: its revision and the key-values it carried.
    pub fn observe(&mut self, outcome: &Outcome) {
        let Outcome::Ok(response) = outcome else { return };
        self.seen_revision = self.seen_revision.max(response.revision());
        let mut learn = |kvs: &[KeyValue]| {
            for kv in kvs {
                self.seen.insert(kv.key.clone(), kv.clone());
            }
        };
        match response {
            Response::Range(r) => learn(&r.kvs),
            Response::Txn(t) => {
                for r in &t.responses {
                    if let Some(response_op::Response::ResponseRange(r)) = &r.response {
                        learn(&r.kvs);
                    }
                }
            }
            _ => {}
        }
    }
}
