//! actcd's benchmarks. The runnable ones live in `benches/`:
//!
//! # Layout
//! - `benches/index_memory.rs`: the revision index's bytes per key and per version, row for row
//!   with etcd's storage-memory table, with the fitted c1 and c2.
#![deny(missing_docs)]
