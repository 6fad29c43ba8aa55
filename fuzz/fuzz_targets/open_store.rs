//! Opening a store on damaged or hostile on-disk records: history records (revision key and
//! kind byte plus KeyValue, well formed or not), meta records (format, compaction revision,
//! applied index) and lease records, written straight into the in-memory engine. Opening must
//! either refuse the data with an error or give a store whose reads and writes work: no panic,
//! no unbounded allocation, no hang.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use prost::Message;

use actcd_actors::lease::lessor::Lessor;
use actcd_store::backend::codec::{APPLIED_KEY, COMPACTED_KEY, FORMAT_KEY, FORMAT_VERSION};
use actcd_store::backend::engine::{Engine, Family, WriteSet};
use actcd_store::backend::memory::MemoryEngine;
use actcd_store::{Batch, Command, StoreConfig, StoreCore};
use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use actcd_proto::mvccpb::KeyValue;

/// Records per input.
const MAX_RECORDS: usize = 64;

fn small_i64(u: &mut Unstructured<'_>) -> Result<i64> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    Ok(i64::from(u.int_in_range(-1i8..=12)?))
}

fn history_key(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    if u.ratio(1, 8)? {
        let len = u.int_in_range(0..=10)?;
        return Ok(u.bytes(len)?.to_vec());
    }
    let main = u64::try_from(small_i64(u)?).unwrap_or(0);
    let sub = u64::from(u.int_in_range(0u8..=3)?);
    Ok(((main << 21) | (sub << 1)).to_be_bytes().to_vec())
}

fn history_value(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    if u.ratio(1, 8)? {
        let len = u.int_in_range(0..=16)?;
        return Ok(u.bytes(len)?.to_vec());
    }
    let kv = KeyValue {
        key: actcd_fuzz::key(u)?,
        create_revision: small_i64(u)?,
        mod_revision: small_i64(u)?,
        version: small_i64(u)?,
        value: actcd_fuzz::value(u)?,
        lease: if u.ratio(1, 4)? { actcd_fuzz::lease(u)? } else { 0 },
    };
    let mut out = vec![*u.choose(b"ppdx")?];
    kv.encode(&mut out).expect("a Vec grows");
    Ok(out)
}

fn meta_value(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=2)? {
        0 => small_i64(u)?.to_be_bytes().to_vec(),
        1 => FORMAT_VERSION.to_vec(),
        _ => {
            let len = u.int_in_range(0..=9)?;
            u.bytes(len)?.to_vec()
        }
    })
}

fn records(u: &mut Unstructured<'_>) -> Result<WriteSet> {
    let mut set = WriteSet::default();
    if u.ratio(3, 4)? {
        set.put(Family::Meta, FORMAT_KEY.to_vec(), FORMAT_VERSION.to_vec());
    }
    for _ in 0..MAX_RECORDS {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0..=7)? {
            0..=4 => set.put(Family::History, history_key(u)?, history_value(u)?),
            5 => {
                let key = *u.choose(&[FORMAT_KEY, COMPACTED_KEY, APPLIED_KEY, b"other"])?;
                set.put(Family::Meta, key.to_vec(), meta_value(u)?);
            }
            _ => {
                let id =
                    if u.ratio(1, 8)? { vec![1, 2, 3] } else { actcd_fuzz::lease(u)?.to_be_bytes().to_vec() };
                set.put(Family::Lease, id, meta_value(u)?);
            }
        }
    }
    Ok(set)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(set) = records(&mut u) else { return };
    let engine = MemoryEngine::new();
    engine.commit(&set).expect("the in-memory engine commits");
    let Ok(mut core) = StoreCore::open(engine, StoreConfig::default()) else { return };
    let view = core.read_view();
    let current = view.revision();
    let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
    let _ = view.range(&all);
    let _ = view.history(0, current, 1 << 12);
    let _ = view.get_at(b"a", current);
    // What the server does with the leases it found at start: deadlines from their TTLs.
    let mut lessor = Lessor::default();
    let now = Instant::now();
    for (id, ttl) in core.lease_list() {
        let _ = core.lease_keys(id);
        lessor.track(id, ttl, now);
    }
    // A store that opened takes writes on top of what it found.
    let mut batch = Batch::default();
    let put = PutRequest { key: "a".into(), value: "v".into(), ..Default::default() };
    let _ = core.apply(&Command::Put(put), &mut batch);
    if let Ok(key) = actcd_fuzz::command(&mut u, current) {
        let _ = core.apply(&key, &mut batch);
    }
    let _ = core.commit_by_log(batch, core.applied_index() + 1);
});
