//! etcd's backend file: the bbolt database that etcd keeps in `member/snap/db` and that
//! `etcdctl snapshot save` writes (with a SHA-256 after it). actcd reads it to move a
//! history from etcd (`actcd migrate`, `actcd snapshot restore`) and writes it for
//! Maintenance.Snapshot, so etcd's backup tools work on actcd and the way back stays open.
//!
//! # Layout
//! - [`bbolt_format`]: the page layout the reader and the writer share.
//! - [`bbolt_reader`]: reads a bbolt file a page at a time, checking every offset.
//! - [`bbolt_writer`]: writes a bbolt file front to back from sorted data, in two passes.
//! - [`backend`]: etcd's buckets read from such a file, and a snapshot's trailing hash.
//! - [`export`]: an actcd store written as etcd's buckets.

pub mod backend;
mod bbolt_format;
pub mod bbolt_reader;
pub mod bbolt_writer;
pub mod export;
