//! Bytes per lease and per attached key: 100k leases (the store's lease index plus the lease
//! actor's deadlines), then 1M keys attached to them (10 per lease, 32-byte keys), measured as
//! jemalloc-allocated bytes before and after, in process.
//!
//! Run: `cargo bench -p actcd-actors --bench lease_memory`.

use std::time::Instant;

use actcd_actors::lease::lessor::Lessor;
use actcd_store::lease_store::index::LeaseIndex;
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const LEASES: i64 = 100_000;
const KEYS_PER_LEASE: i64 = 10;
const KEY_SIZE: usize = 32;

fn allocated() -> u64 {
    // Statistics are cached until the epoch advances.
    let _ = epoch::advance();
    stats::allocated::read().map(|v| v as u64).unwrap_or(0)
}

fn key(lease: i64, i: i64) -> Vec<u8> {
    let mut k = format!("/registry/events/{lease:010}/{i:03}").into_bytes();
    k.resize(KEY_SIZE, b'.');
    k
}

fn main() {
    let start = allocated();
    let now = Instant::now();
    let mut index = LeaseIndex::default();
    let mut lessor = Lessor::default();
    for id in 1..=LEASES {
        index.grant(id, 60);
        lessor.track(id, 60, now);
    }
    let with_leases = allocated();
    for id in 1..=LEASES {
        for i in 0..KEYS_PER_LEASE {
            index.attach(&key(id, i), id);
        }
    }
    let with_keys = allocated();
    let keys = LEASES * KEYS_PER_LEASE;
    let per_lease = (with_leases - start) as f64 / LEASES as f64;
    let per_key = (with_keys - with_leases) as f64 / keys as f64;
    println!("| what | count | allocated | bytes each |");
    println!("|---|---:|---:|---:|");
    println!(
        "| leases (index entry + deadline + heap entry) | {LEASES} | {:.1} MB | {per_lease:.1} |",
        (with_leases - start) as f64 / 1e6
    );
    println!(
        "| attached keys of {KEY_SIZE} bytes (in the lease's key set and the key → lease map) | {keys} | {:.1} MB | {per_key:.1} |",
        (with_keys - with_leases) as f64 / 1e6
    );
    println!();
    println!(
        "per attached key beyond its two copies of the key bytes: {:.1} B",
        per_key - 2.0 * KEY_SIZE as f64
    );
    assert_eq!(index.len(), LEASES as usize);
    assert_eq!(lessor.len(), LEASES as usize);
}
