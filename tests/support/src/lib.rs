//! Dev-only helpers shared by actcd's tests, benches and fuzz targets. It depends on no other
//! crate of the workspace but the wire contract, so nothing here links RocksDB.
//!
//! # Layout
//! - [`module_graph`]: which modules of a crate use which, and the import circles among them.
#![deny(missing_docs)]

pub mod module_graph;
