//! A sequential model of etcd's MVCC store: every key's versions by revision, from an empty
//! store at revision 1, against which the store core's model test and the linearizability
//! checker compare what actcd answers. It answers Range (key, range_end, revision, limit, keys_only,
//! count_only), Put (prev_kv), DeleteRange (prev_kv), non-nested Txn (compares on value,
//! version, create, mod and lease, on a key or a range) and Compact, as etcd 3.4 does, and
//! keeps the events of each revision so a checker can step back (`undo`) and watchers can be
//! compared with it. Compaction is left to the checker: the model keeps every revision.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use actcd_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use actcd_proto::etcdserverpb::{
    request_op, response_op, CompactionRequest, CompactionResponse, Compare, DeleteRangeRequest,
    DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, ResponseHeader, ResponseOp,
    TxnRequest, TxnResponse,
};
use actcd_proto::key_range::KeyRange;
use actcd_proto::mvccpb::event::EventType;
use actcd_proto::mvccpb::{Event, KeyValue};

/// One KV call.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Range.
    Range(RangeRequest),
    /// Put.
    Put(PutRequest),
    /// DeleteRange.
    Delete(DeleteRangeRequest),
    /// Txn.
    Txn(TxnRequest),
    /// Compact.
    Compact(CompactionRequest),
}

/// Its answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// Range's.
    Range(RangeResponse),
    /// Put's.
    Put(PutResponse),
    /// DeleteRange's.
    Delete(DeleteRangeResponse),
    /// Txn's.
    Txn(TxnResponse),
    /// Compact's.
    Compact(CompactionResponse),
}

impl Response {
    /// The header revision: the store's revision when the call took effect.
    pub fn revision(&self) -> i64 {
        let header = match self {
            Response::Range(r) => &r.header,
            Response::Put(r) => &r.header,
            Response::Delete(r) => &r.header,
            Response::Txn(r) => &r.header,
            Response::Compact(r) => &r.header,
        };
        header.as_ref().map_or(0, |h| h.revision)
    }
}

/// One version of a key: its value from `revision` on, `None` once deleted.
#[derive(Clone, Debug)]
struct Version {
    revision: i64,
    kv: Option<KeyValue>,
}

/// The store as a sequence of revisions.
#[derive(Clone, Debug, Default)]
pub struct Model {
    revision: i64,
    keys: BTreeMap<Bytes, Vec<Version>>,
    /// The events of revision r at index r - 2 (revision 1 is the empty store).
    events: Vec<Vec<Event>>,
    /// Events of the write being applied, at revision `revision + 1`.
    pending: Vec<Event>,
}

impl Model {
    /// An empty store at revision 1, as etcd starts.
    pub fn new() -> Self {
        Model { revision: 1, ..Default::default() }
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The events that made revision `r` (empty for revision 1 and for revisions not made yet).
    pub fn events_of(&self, r: i64) -> &[Event] {
        usize::try_from(r - 2).ok().and_then(|i| self.events.get(i)).map_or(&[], Vec::as_slice)
    }

    /// Every event from revision `from` on, in order.
    pub fn events_from(&self, from: i64) -> Vec<Event> {
        (from.max(2)..=self.revision).flat_map(|r| self.events_of(r).iter().cloned()).collect()
    }

    /// Applies `request` at the current revision: the answer (headers carry the revision
    /// only) and whether it made a new revision.
    pub fn apply(&mut self, request: &Request) -> (Response, bool) {
        let response = match request {
            Request::Range(r) => {
                let at = if r.revision > 0 { r.revision } else { self.revision };
                Response::Range(self.range(r, at))
            }
            Request::Put(p) => Response::Put(self.put(p)),
            Request::Delete(d) => Response::Delete(self.delete(d)),
            Request::Txn(t) => Response::Txn(self.txn(t)),
            Request::Compact(_) => Response::Compact(CompactionResponse::default()),
        };
        let changed = !self.pending.is_empty();
        if changed {
            self.revision += 1;
            self.events.push(std::mem::take(&mut self.pending));
        }
        let header = Some(ResponseHeader { revision: self.revision, ..Default::default() });
        let response = match response {
            Response::Range(r) => Response::Range(RangeResponse { header, ..r }),
            Response::Put(r) => Response::Put(PutResponse { header, ..r }),
            Response::Delete(r) => Response::Delete(DeleteRangeResponse { header, ..r }),
            Response::Txn(r) => Response::Txn(TxnResponse { header, ..r }),
            Response::Compact(_) => Response::Compact(CompactionResponse { header }),
        };
        (response, changed)
    }

    /// Takes back the newest revision.
    pub fn undo(&mut self) {
        let Some(events) = self.events.pop() else { return };
        for event in events.iter().rev() {
            let key = event.kv.as_ref().map(|kv| kv.key.clone()).unwrap_or_default();
            if let Some(versions) = self.keys.get_mut(&key) {
                versions.pop();
                if versions.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        self.revision -= 1;
    }

    /// The key's value at revision `at`.
    fn get(&self, key: &[u8], at: i64) -> Option<&KeyValue> {
        self.keys.get(key)?.iter().rev().find(|v| v.revision <= at)?.kv.as_ref()
    }

    /// The live key-values of `key` and `range_end` at revision `at`, by key.
    fn live(&self, key: &Bytes, range_end: &[u8], at: i64) -> Vec<&KeyValue> {
        let range = KeyRange::new(key, range_end);
        let upper = match range {
            KeyRange::Key(key) => return self.get(key, at).into_iter().collect(),
            _ if range.is_empty() => return Vec::new(),
            KeyRange::From(_) => Bound::Unbounded,
            KeyRange::Between(_, end) => Bound::Excluded(Bytes::copy_from_slice(end)),
        };
        self.keys.range((Bound::Included(key.clone()), upper)).filter_map(|(k, _)| self.get(k, at)).collect()
    }

    fn range(&self, r: &RangeRequest, at: i64) -> RangeResponse {
        let live = self.live(&r.key, &r.range_end, at);
        let count = live.len() as i64;
        if r.count_only {
            return RangeResponse { count, ..Default::default() };
        }
        let limit = if r.limit > 0 { r.limit as usize } else { usize::MAX };
        let kvs =
            live.iter()
                .take(limit)
                .map(|kv| {
                    if r.keys_only {
                        KeyValue { value: Bytes::new(), ..(*kv).clone() }
                    } else {
                        (*kv).clone()
                    }
                })
                .collect::<Vec<_>>();
        RangeResponse { more: (kvs.len() as i64) < count, count, kvs, header: None }
    }

    /// The revision a write in progress writes at.
    fn next(&self) -> i64 {
        self.revision + 1
    }

    fn record(&mut self, key: Bytes, kv: Option<KeyValue>, prev: Option<KeyValue>) {
        let revision = self.next();
        let (kind, event_kv) = match &kv {
            Some(kv) => (EventType::Put, kv.clone()),
            None => (
                EventType::Delete,
                KeyValue { key: key.clone(), mod_revision: revision, ..Default::default() },
            ),
        };
        self.pending.push(Event { r#type: kind as i32, kv: Some(event_kv), prev_kv: prev });
        self.keys.entry(key).or_default().push(Version { revision, kv });
    }

    fn put(&mut self, p: &PutRequest) -> PutResponse {
        let revision = self.next();
        let prev = self.get(&p.key, revision).cloned();
        let kv = KeyValue {
            key: p.key.clone(),
            create_revision: prev.as_ref().map_or(revision, |kv| kv.create_revision),
            mod_revision: revision,
            version: prev.as_ref().map_or(1, |kv| kv.version + 1),
            value: p.value.clone(),
            lease: p.lease,
        };
        self.record(p.key.clone(), Some(kv), prev.clone());
        PutResponse { header: None, prev_kv: if p.prev_kv { prev } else { None } }
    }

    fn delete(&mut self, d: &DeleteRangeRequest) -> DeleteRangeResponse {
        let gone: Vec<KeyValue> = self.live(&d.key, &d.range_end, self.next()).into_iter().cloned().collect();
        for kv in &gone {
            self.record(kv.key.clone(), None, Some(kv.clone()));
        }
        DeleteRangeResponse {
            header: None,
            deleted: gone.len() as i64,
            prev_kvs: if d.prev_kv { gone } else { Vec::new() },
        }
    }

    fn txn(&mut self, t: &TxnRequest) -> TxnResponse {
        let succeeded = t.compare.iter().all(|c| self.holds(c));
        let branch = if succeeded { &t.success } else { &t.failure };
        let mut responses = Vec::new();
        for op in branch {
            let response = match &op.request {
                Some(request_op::Request::RequestRange(r)) => {
                    response_op::Response::ResponseRange(self.range(r, self.next()))
                }
                Some(request_op::Request::RequestPut(p)) => response_op::Response::ResponsePut(self.put(p)),
                Some(request_op::Request::RequestDeleteRange(d)) => {
                    response_op::Response::ResponseDeleteRange(self.delete(d))
                }
                Some(request_op::Request::RequestTxn(_)) | None => {
                    panic!("the model does not cover nested or empty txn ops")
                }
            };
            responses.push(ResponseOp { response: Some(response) });
        }
        TxnResponse { header: None, succeeded, responses }
    }

    /// etcd's applyCompare: a value compare on a missing key fails; other targets compare a
    /// missing key as zero; on a range every key must match.
    fn holds(&self, c: &Compare) -> bool {
        let target = CompareTarget::try_from(c.target).unwrap_or(CompareTarget::Version);
        let live = self.live(&c.key, &c.range_end, self.revision);
        if live.is_empty() {
            return target != CompareTarget::Value && compare_one(c, target, &KeyValue::default());
        }
        live.iter().all(|kv| compare_one(c, target, kv))
    }
}

fn compare_one(c: &Compare, target: CompareTarget, kv: &KeyValue) -> bool {
    let number = |n: i64| match &c.target_union {
        Some(TargetUnion::Version(v) | TargetUnion::CreateRevision(v) | TargetUnion::ModRevision(v))
        | Some(TargetUnion::Lease(v)) => n.cmp(v),
        _ => n.cmp(&0),
    };
    let ordering = match target {
        CompareTarget::Version => number(kv.version),
        CompareTarget::Create => number(kv.create_revision),
        CompareTarget::Mod => number(kv.mod_revision),
        CompareTarget::Lease => number(kv.lease),
        CompareTarget::Value => match &c.target_union {
            Some(TargetUnion::Value(v)) => kv.value.as_ref().cmp(v.as_ref()),
            _ => kv.value.as_ref().cmp(&[][..]),
        },
    };
    match CompareResult::try_from(c.result).unwrap_or(CompareResult::Equal) {
        CompareResult::Equal => ordering == Ordering::Equal,
        CompareResult::Greater => ordering == Ordering::Greater,
        CompareResult::Less => ordering == Ordering::Less,
        CompareResult::NotEqual => ordering != Ordering::Equal,
    }
}

/// The answer without its headers (the revision is checked on its own; member ids and terms
/// are not the model's business).
pub fn without_headers(response: &Response) -> Response {
    fn op(r: &ResponseOp) -> ResponseOp {
        let response = r.response.as_ref().map(|r| match r {
            response_op::Response::ResponseRange(x) => {
                response_op::Response::ResponseRange(RangeResponse { header: None, ..x.clone() })
            }
            response_op::Response::ResponsePut(x) => {
                response_op::Response::ResponsePut(PutResponse { header: None, ..x.clone() })
            }
            response_op::Response::ResponseDeleteRange(x) => {
                response_op::Response::ResponseDeleteRange(DeleteRangeResponse { header: None, ..x.clone() })
            }
            response_op::Response::ResponseTxn(x) => response_op::Response::ResponseTxn(TxnResponse {
                header: None,
                succeeded: x.succeeded,
                responses: x.responses.iter().map(op).collect(),
            }),
        });
        ResponseOp { response }
    }
    match response {
        Response::Range(r) => Response::Range(RangeResponse { header: None, ..r.clone() }),
        Response::Put(r) => Response::Put(PutResponse { header: None, ..r.clone() }),
        Response::Delete(r) => Response::Delete(DeleteRangeResponse { header: None, ..r.clone() }),
        Response::Txn(r) => Response::Txn(TxnResponse {
            header: None,
            succeeded: r.succeeded,
            responses: r.responses.iter().map(op).collect(),
        }),
        Response::Compact(_) => Response::Compact(CompactionResponse { header: None }),
    }
}
