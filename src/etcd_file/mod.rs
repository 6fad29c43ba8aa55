//! etcd's backend file: the bbolt database that etcd keeps in `member/snap/db` and that
//! `etcdctl snapshot save` writes (with a SHA-256 after it). actcd reads it to move a
//! history from etcd (`actcd migrate`, `actcd snapshot restore`) and writes it for
//! Maintenance.Snapshot, so etcd's backup tools work on actcd and the way back stays open.
//! The file format itself is `actcd_edge::bbolt`'s; what stays here reads and writes the
//! store's records, which need RocksDB.
//!
//! # Layout
//! - [`backend`]: etcd's buckets read from such a file, and a snapshot's trailing hash.
//! - [`export`]: an actcd store written as etcd's buckets.

pub mod backend;
pub mod export;
