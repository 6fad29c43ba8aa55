//! A Range read in two steps with a pause between them, for a reader that reserves memory for
//! the answer before it reads it (the gRPC edge's read budget): [`ReadView::plan_range`] makes
//! etcd's checks and the index pass and estimates the answer's size; [`ReadView::encode_range`]
//! then reads the values and hands each key's `mvccpb.KeyValue` encoding to the caller,
//! straight from the engine's buffers, so that what the caller builds is the only copy.
//!
//! Why stored bytes can go out as they are: a history record is one kind byte and then the
//! KeyValue's protobuf encoding ([`crate::backend::codec`]), which is what RangeResponse's `kvs` field
//! carries. Only a keys_only answer is re-encoded (its values left out), one key at a time;
//! and an answer that etcd sorts or filters after reading the whole range takes the
//! materialising path ([`range::finish_range`]), each key encoded after.
//!
//! Between the two steps a compaction may remove what the plan names: the second step then
//! fails with [`StoreError::Compacted`], as a read overtaken by one always has.

use prost::Message;

use actcd_proto::etcdserverpb::{RangeRequest, RangeResponse};
use actcd_proto::mvccpb::KeyValue;

use crate::apply::validate;
use crate::backend::codec;
use crate::backend::engine::{Engine, Family};
use crate::error::StoreError;
use crate::mvcc::range::{self, EngineSource, RangePlan};
use crate::mvcc::read_view::ReadView;
use crate::mvcc::revision::Revision;

/// Values fetched per engine call: enough for RocksDB's MultiGet to share block reads between
/// neighbours, few enough that the pinned blocks stay small.
const READ_BATCH: usize = 256;
/// Reads naming more values than this bypass the block cache.
const BULK_READ: usize = 1024;
/// Values read to estimate an answer's size, spread evenly over the range.
const SAMPLES: usize = 32;
/// What a value is taken to cost in a range too small to sample.
const ASSUMED_RECORD_BYTES: u64 = 1024;

/// Where a part of step two ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// More values to read, from this position.
    Next(usize),
    /// All read; etcd's `more` for the answer.
    Done {
        /// Keys beyond the limit.
        more: bool,
    },
}

/// A Range whose index pass is done and whose values are not read yet.
pub struct PlannedRange {
    plan: RangePlan,
    /// The newest revision at planning: what the header reports.
    header_revision: i64,
    /// Whether the limit went into the index pass (no sort, no filter), so the values can be
    /// read in key order and sent as they are read.
    in_key_order: bool,
    estimated_bytes: u64,
}

impl PlannedRange {
    /// The revision for the response header.
    pub fn header_revision(&self) -> i64 {
        self.header_revision
    }

    /// etcd's count: keys live in the range at the read revision, whatever the limit.
    pub fn count(&self) -> i64 {
        self.plan.count
    }

    /// About how many bytes the encoded kvs will take, from a sample of the values spread over
    /// the range: an estimate, not a bound.
    pub fn estimated_bytes(&self) -> u64 {
        self.estimated_bytes
    }
}

impl<E: Engine> ReadView<E> {
    /// Step one of a Range: etcd's checks, the read revision, and the index pass.
    pub fn plan_range(&self, req: &RangeRequest) -> Result<PlannedRange, StoreError> {
        metrics::counter!(crate::metric_names::ETCD_MVCC_RANGE_TOTAL).increment(1);
        self.plan(req)
    }

    /// The bytes a Range's kvs would take, about (see [`PlannedRange::estimated_bytes`]), for a
    /// reader that reserves memory for several: an index pass, not counted as a range.
    pub fn estimate_range(&self, req: &RangeRequest) -> Result<u64, StoreError> {
        Ok(self.plan(req)?.estimated_bytes)
    }

    fn plan(&self, req: &RangeRequest) -> Result<PlannedRange, StoreError> {
        validate::check_range(req)?;
        let header_revision = self.revision();
        let at = range::read_revision(req.revision, header_revision, self.compacted_revision())?;
        let plan = range::plan_range(&*self.shared.read_index()?, req, at);
        let in_key_order = !range::needs_full_scan(req);
        let wanted = if in_key_order { wanted(req, plan.revisions.len()) } else { plan.revisions.len() };
        let estimated_bytes = self.estimate(&plan.revisions[..wanted], req.keys_only)?;
        Ok(PlannedRange { plan, header_revision, in_key_order, estimated_bytes })
    }

    /// The encoded size of `revisions`' KeyValues, from [`SAMPLES`] of them. A sample that a
    /// compaction removed is left out; the read itself will notice.
    fn estimate(&self, revisions: &[Revision], keys_only: bool) -> Result<u64, StoreError> {
        let n = revisions.len();
        if n <= SAMPLES {
            return Ok(n as u64 * ASSUMED_RECORD_BYTES);
        }
        let step = n / SAMPLES;
        let keys: Vec<[u8; 8]> =
            (0..SAMPLES).map(|i| key_bytes(revisions[i * step])).collect::<Result<_, _>>()?;
        let (mut bytes, mut seen) = (0u64, 0u64);
        self.shared.engine.visit_many(Family::History, &keys, false, &mut |_, value| {
            let Some(value) = value else { return Ok(()) };
            let (_, body) = codec::split_history_value(value)?;
            let len = if keys_only { without_value(body)?.encoded_len() } else { body.len() };
            // The kvs field's tag and length take a few bytes more.
            bytes += len as u64 + 4;
            seen += 1;
            Ok(())
        })?;
        Ok(bytes.saturating_mul(n as u64).checked_div(seen).unwrap_or(n as u64 * ASSUMED_RECORD_BYTES))
    }

    /// Step two: reads the values `planned` names and passes each key's encoded KeyValue to
    /// `out`, in the answer's order; returns etcd's `more`.
    pub fn encode_range(
        &self,
        planned: &PlannedRange,
        req: &RangeRequest,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, StoreError> {
        let mut from = 0;
        loop {
            match self.encode_range_part(planned, req, from, usize::MAX, out)? {
                Part::Next(next) => from = next,
                Part::Done { more } => return Ok(more),
            }
        }
    }

    /// Step two a part at a time, for a caller that accounts for the bytes as they come: the
    /// values from position `from` on, until `out` has taken at least `bytes` more (in read
    /// batches, so a little more). An answer that is sorted or filtered comes in one part.
    pub fn encode_range_part(
        &self,
        planned: &PlannedRange,
        req: &RangeRequest,
        from: usize,
        bytes: usize,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<Part, StoreError> {
        let part = if planned.in_key_order {
            self.encode_in_key_order(planned, req, from, bytes, out)?
        } else {
            let resp = self.range_planned(planned, req)?;
            let mut scratch = Vec::new();
            for kv in &resp.kvs {
                scratch.clear();
                // Encoding into a Vec cannot run out of space.
                let _ = kv.encode(&mut scratch);
                out(&scratch);
            }
            Part::Done { more: resp.more }
        };
        // A compaction that overtook the index pass may have dropped what it named.
        if planned.plan.at_rev < self.compacted_revision() {
            return Err(StoreError::Compacted);
        }
        Ok(part)
    }

    /// Step two for a caller that wants the answer as a message: the values, then etcd's
    /// filters, sort and limit (the header names only the revision).
    pub fn range_planned(
        &self,
        planned: &PlannedRange,
        req: &RangeRequest,
    ) -> Result<RangeResponse, StoreError> {
        let kvs = range::load_values(&EngineSource(&self.shared.engine), &planned.plan)?;
        if planned.plan.at_rev < self.compacted_revision() {
            return Err(StoreError::Compacted);
        }
        Ok(range::finish_range(req, kvs, planned.plan.count, planned.header_revision))
    }

    fn encode_in_key_order(
        &self,
        planned: &PlannedRange,
        req: &RangeRequest,
        from: usize,
        bytes: usize,
        out: &mut dyn FnMut(&[u8]),
    ) -> Result<Part, StoreError> {
        let revisions = &planned.plan.revisions;
        let wanted = wanted(req, revisions.len());
        let bulk = wanted > BULK_READ;
        let mut scratch = Vec::new();
        let mut given = 0usize;
        let mut next = from.min(wanted);
        for batch in revisions[next..wanted].chunks(READ_BATCH) {
            if given >= bytes {
                return Ok(Part::Next(next));
            }
            next += batch.len();
            let keys: Vec<[u8; 8]> = batch.iter().copied().map(key_bytes).collect::<Result<_, _>>()?;
            self.shared.engine.visit_many(Family::History, &keys, bulk, &mut |_, value| {
                let value = value.ok_or(StoreError::Compacted)?;
                let (_, body) = codec::split_history_value(value)?;
                if !req.keys_only {
                    given += body.len();
                    out(body);
                    return Ok(());
                }
                scratch.clear();
                let _ = without_value(body)?.encode(&mut scratch);
                given += scratch.len();
                out(&scratch);
                Ok(())
            })?;
        }
        Ok(Part::Done { more: wanted < revisions.len() })
    }
}

/// Values a key-ordered read sends: the limit's worth of what the index pass found (it found
/// one more than the limit, to learn whether there is more).
fn wanted(req: &RangeRequest, found: usize) -> usize {
    match usize::try_from(req.limit) {
        Ok(limit) if limit > 0 => limit.min(found),
        _ => found,
    }
}

fn key_bytes(revision: Revision) -> Result<[u8; 8], StoreError> {
    revision.try_to_key_bytes().map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A stored KeyValue as keys_only sends it.
fn without_value(body: &[u8]) -> Result<KeyValue, StoreError> {
    let mut kv = KeyValue::decode(body).map_err(|e| StoreError::Corrupt(format!("history record: {e}")))?;
    kv.value = Default::default();
    Ok(kv)
}

/// Checked against the materialising Range, which the rest of the store answers with.
#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use prost::Message;

    use actcd_proto::etcdserverpb::{CompactionRequest, RangeRequest, RangeResponse};
    use actcd_proto::mvccpb::KeyValue;

    use crate::apply::command::Command;
    use crate::apply::writer::{StoreConfig, StoreCore};
    use crate::backend::memory::MemoryEngine;
    use crate::error::StoreError;
    use crate::mvcc::read_view::tests::{apply, put};

    use super::Part;

    fn encoded(core: &StoreCore<MemoryEngine>, req: &RangeRequest) -> Result<RangeResponse, StoreError> {
        let view = core.read_view();
        let planned = view.plan_range(req)?;
        let mut kvs = Vec::new();
        let more = view.encode_range(&planned, req, &mut |bytes| {
            kvs.push(KeyValue::decode(bytes).expect("a KeyValue"));
        })?;
        Ok(RangeResponse { header: None, kvs, more, count: planned.count() })
    }

    #[test]
    fn the_encoded_answer_is_the_range_answer() {
        let mut core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("opens");
        for (i, key) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            apply(&mut core, put(key, &"v".repeat(i + 1)));
        }
        apply(&mut core, put("b", "changed"));
        let all = |f: fn(&mut RangeRequest)| {
            let mut req = RangeRequest {
                key: Bytes::from_static(b"a"),
                range_end: Bytes::from_static(b"z"),
                ..Default::default()
            };
            f(&mut req);
            req
        };
        let cases = [
            all(|_| {}),
            all(|r| r.limit = 2),
            all(|r| r.limit = 5),
            all(|r| r.keys_only = true),
            all(|r| r.count_only = true),
            all(|r| r.revision = 3),
            all(|r| {
                r.sort_order = 2;
                r.sort_target = 4;
                r.limit = 3;
            }),
            all(|r| r.min_mod_revision = 4),
            RangeRequest { key: Bytes::from_static(b"c"), ..Default::default() },
        ];
        let view = core.read_view();
        for req in &cases {
            let mut want = view.range(req).expect("a range");
            want.header = None;
            assert_eq!(encoded(&core, req), Ok(want), "{req:?}");
        }
    }

    /// Part by part, positions step by whole read batches and the parts make the whole.
    #[test]
    fn parts_make_the_whole_answer() {
        let mut core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("opens");
        for i in 0..600 {
            apply(&mut core, put(&format!("k{i:03}"), "v"));
        }
        let view = core.read_view();
        let req = RangeRequest {
            key: Bytes::from_static(b"k"),
            range_end: Bytes::from_static(b"l"),
            limit: 550,
            ..Default::default()
        };
        let planned = view.plan_range(&req).expect("a plan");
        let (mut parts, mut kvs, mut from) = (Vec::new(), Vec::new(), 0);
        let more = loop {
            let part = view
                .encode_range_part(&planned, &req, from, 1, &mut |bytes| {
                    kvs.push(KeyValue::decode(bytes).expect("a KeyValue"))
                })
                .expect("a part");
            parts.push(part);
            match part {
                Part::Next(next) => from = next,
                Part::Done { more } => break more,
            }
        };
        assert_eq!(parts, [Part::Next(256), Part::Next(512), Part::Done { more: true }]);
        let whole = view.range(&req).expect("a range");
        assert_eq!((kvs, more), (whole.kvs, whole.more));
    }

    #[test]
    fn a_compaction_between_the_steps_refuses_the_read() {
        let mut core = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("opens");
        apply(&mut core, put("a", "1"));
        apply(&mut core, put("a", "2"));
        let view = core.read_view();
        let req = RangeRequest { key: Bytes::from_static(b"a"), revision: 2, ..Default::default() };
        let planned = view.plan_range(&req).expect("a plan");
        apply(&mut core, Command::Compact(CompactionRequest { revision: 3, physical: true }));
        assert_eq!(view.encode_range(&planned, &req, &mut |_| {}), Err(StoreError::Compacted));
    }
}
