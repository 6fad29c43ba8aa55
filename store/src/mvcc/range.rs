//! Reading at a revision: Range evaluation and Txn compares, shared by the concurrent read view
//! and the writer (which reads its own uncommitted changes inside a txn).
//!
//! A read has two steps: the index names the revision of each key live at the read revision,
//! then the values are fetched by revision. Readers hold the index lock only for the first step.

use actcd_proto::etcdserverpb::{compare, Compare, RangeRequest, RangeResponse, ResponseHeader};
use actcd_proto::mvccpb::KeyValue;

use crate::backend::codec;
use crate::backend::engine::{Engine, Family};
use crate::error::StoreError;
use crate::mvcc::index::Index;
use crate::mvcc::revision::Revision;

/// A consistent place to read from at one revision: the read view pinned at its revision, or
/// the writer inside a command (which reads its own changes so far).
pub trait View {
    /// The revision reads see and report in headers.
    fn current(&self) -> i64;
    /// Evaluates a Range (with etcd's revision checks).
    fn range(&self, req: &RangeRequest) -> Result<RangeResponse, StoreError>;
}

/// Somewhere values can be fetched from by revision.
pub trait ValueSource {
    /// Fetches the KeyValue stored at each revision, `None` where it is gone (compacted).
    fn load(&self, revisions: &[Revision]) -> Result<Vec<Option<KeyValue>>, StoreError>;
}

/// Values as the engine holds them: what is durable.
pub struct EngineSource<'a, E>(pub &'a E);

impl<E: Engine> ValueSource for EngineSource<'_, E> {
    fn load(&self, revisions: &[Revision]) -> Result<Vec<Option<KeyValue>>, StoreError> {
        load_from_engine(self.0, revisions)
    }
}

/// Fetches history records by revision from the engine.
pub fn load_from_engine(
    engine: &impl Engine,
    revisions: &[Revision],
) -> Result<Vec<Option<KeyValue>>, StoreError> {
    if revisions.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<Vec<u8>> = revisions.iter().map(|r| r.to_key_bytes().to_vec()).collect();
    engine
        .get_many(Family::History, &keys)?
        .into_iter()
        .map(|v| match v {
            Some(bytes) => codec::decode_history_value(&bytes).map(|(_, kv)| Some(kv)),
            None => Ok(None),
        })
        .collect()
}

/// What the index pass of a Range found.
pub struct RangePlan {
    /// Revisions to fetch, in key order.
    pub revisions: Vec<Revision>,
    /// Keys live in the range at the read revision, regardless of limit (etcd's count).
    pub count: i64,
    /// The revision read at.
    pub at_rev: i64,
}

/// Resolves the revision a request reads at, with etcd's compacted / future checks.
pub fn read_revision(requested: i64, current: i64, compacted: i64) -> Result<i64, StoreError> {
    if requested > current {
        return Err(StoreError::FutureRevision);
    }
    let at = if requested <= 0 { current } else { requested };
    if at < compacted {
        return Err(StoreError::Compacted);
    }
    Ok(at)
}

/// True when etcd fetches every key of the range before filtering and sorting, so the limit
/// cannot be pushed into the index walk.
pub(crate) fn needs_full_scan(req: &RangeRequest) -> bool {
    req.sort_order != 0
        || req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0
}

/// The index pass of a Range at `at_rev`.
pub fn plan_range(index: &Index, req: &RangeRequest, at_rev: i64) -> RangePlan {
    let limit = if needs_full_scan(req) || req.limit <= 0 {
        0
    } else {
        // One more than asked, to learn whether there is more.
        usize::try_from(req.limit).unwrap_or(usize::MAX - 1).saturating_add(1)
    };
    let mut revisions = Vec::new();
    let count = if req.count_only {
        index.range(&req.key, &req.range_end, at_rev, 0, |_, _| {})
    } else {
        index.range(&req.key, &req.range_end, at_rev, limit, |_, at| revisions.push(at.mod_revision))
    };
    RangePlan { revisions, count: count as i64, at_rev }
}

/// Fetches the values a plan names; a value gone missing means a compaction overtook the read.
pub fn load_values(source: &impl ValueSource, plan: &RangePlan) -> Result<Vec<KeyValue>, StoreError> {
    let loaded = source.load(&plan.revisions)?;
    loaded.into_iter().map(|kv| kv.ok_or(StoreError::Compacted)).collect()
}

/// The filter, sort and limit pass of etcd's `executeRange`, then the response.
pub fn finish_range(
    req: &RangeRequest,
    mut kvs: Vec<KeyValue>,
    count: i64,
    header_rev: i64,
) -> RangeResponse {
    if req.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= req.max_mod_revision);
    }
    if req.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= req.min_mod_revision);
    }
    if req.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= req.max_create_revision);
    }
    if req.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= req.min_create_revision);
    }
    // A target other than KEY with no order sorts ascending; KEY ascending is the index order.
    let mut order = req.sort_order;
    if req.sort_target != 0 && order == 0 {
        order = 1;
    }
    // Only ASCEND and DESCEND sort; etcd leaves any other order value unsorted.
    if order == 1 || order == 2 {
        let by = |a: &KeyValue, b: &KeyValue| match req.sort_target {
            1 => a.version.cmp(&b.version),
            2 => a.create_revision.cmp(&b.create_revision),
            3 => a.mod_revision.cmp(&b.mod_revision),
            4 => a.value.cmp(&b.value),
            _ => a.key.cmp(&b.key),
        };
        if order == 2 {
            kvs.sort_by(|a, b| by(b, a));
        } else {
            kvs.sort_by(by);
        }
    }
    let mut more = false;
    if req.limit > 0 && kvs.len() as i64 > req.limit {
        kvs.truncate(req.limit as usize);
        more = true;
    }
    if req.keys_only {
        for kv in &mut kvs {
            kv.value = Default::default();
        }
    }
    RangeResponse {
        header: Some(ResponseHeader { revision: header_rev, ..Default::default() }),
        kvs,
        more,
        count,
    }
}

/// etcd's `applyCompare`: every key in the compare's range must satisfy it; a missing key
/// compares as a zero KeyValue, except that a VALUE compare on a missing key is false.
pub fn compare_holds(cmp: &Compare, kvs: &[KeyValue]) -> bool {
    if kvs.is_empty() {
        if cmp.target == compare::CompareTarget::Value as i32 {
            return false;
        }
        return compare_one(cmp, &KeyValue::default());
    }
    kvs.iter().all(|kv| compare_one(cmp, kv))
}

fn compare_one(cmp: &Compare, kv: &KeyValue) -> bool {
    use compare::{CompareTarget as T, TargetUnion as U};
    // A number the union does not carry for this target compares as 0, as etcd's zero value.
    let number = |actual: i64| {
        let expected = match (cmp.target(), &cmp.target_union) {
            (T::Create, Some(U::CreateRevision(v)))
            | (T::Mod, Some(U::ModRevision(v)))
            | (T::Version, Some(U::Version(v)))
            | (T::Lease, Some(U::Lease(v))) => *v,
            _ => 0,
        };
        actual.cmp(&expected)
    };
    let ordering = match T::try_from(cmp.target) {
        Ok(T::Value) => {
            let expected: &[u8] = match &cmp.target_union {
                Some(U::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_ref().cmp(expected)
        }
        Ok(T::Create) => number(kv.create_revision),
        Ok(T::Mod) => number(kv.mod_revision),
        Ok(T::Version) => number(kv.version),
        Ok(T::Lease) => number(kv.lease),
        Err(_) => std::cmp::Ordering::Equal,
    };
    match compare::CompareResult::try_from(cmp.result) {
        Ok(compare::CompareResult::Equal) => ordering.is_eq(),
        Ok(compare::CompareResult::NotEqual) => ordering.is_ne(),
        Ok(compare::CompareResult::Greater) => ordering.is_gt(),
        Ok(compare::CompareResult::Less) => ordering.is_lt(),
        Err(_) => true,
    }
}

/// The range a compare reads: all of it, at `at_rev`.
pub fn compare_range(cmp: &Compare) -> RangeRequest {
    RangeRequest { key: cmp.key.clone(), range_end: cmp.range_end.clone(), ..Default::default() }
}
