//! One software-transactional-memory transaction as etcd's client (`concurrency.STM`) runs it:
//! gets go to the server and into a read set, puts into a write set, and the commit is one Txn
//! whose compares guard the read set (and, for serializable snapshot, the write set); a commit
//! whose compares fail is retried from the start.
//!
//! What each isolation level reads and checks:
//!
//! | level | gets | the commit's compares |
//! | --- | --- | --- |
//! | read committed (`c`) | serializable, latest | none |
//! | repeatable reads (`r`) | serializable, latest | every read key's mod revision unchanged |
//! | serializable (`s`) | the first linearizable, the rest serializable at its revision | as `r` |
//! | serializable snapshot (`ss`) | as `s` | as `r`, and no written key modified after the first read |
//!
//! The serializable levels also read every key of the read set in the commit's failure branch,
//! so a retry starts from those values without asking again (etcd's prefetch).

use crate::cmd::{compare, put_op, range_of, range_op};
use crate::conn::Conn;
use actcd_proto::etcdserverpb::compare::{CompareResult, TargetUnion};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use actcd_proto::etcdserverpb::{RangeRequest, RangeResponse, TxnRequest, TxnResponse};
use bytes::Bytes;
use std::collections::BTreeMap;
use tonic::Status;

/// `--isolation`, by etcd's letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    #[value(name = "c")]
    ReadCommitted,
    #[value(name = "r")]
    RepeatableReads,
    #[value(name = "s")]
    Serializable,
    #[value(name = "ss")]
    SerializableSnapshot,
}

impl Isolation {
    fn serializable(self) -> bool {
        matches!(self, Isolation::Serializable | Isolation::SerializableSnapshot)
    }
}

/// What a get saw of one key: its mod revision (0 when it did not exist), and the store's
/// revision when it was read.
#[derive(Debug, Clone, PartialEq)]
struct Read {
    mod_revision: i64,
    revision: i64,
}

/// How a commit ended: applied, or a compare failed (run the transaction again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Done,
    Retry,
}

/// One STM transaction over `kv`: [`Stm::reset`], then gets and puts, then [`Stm::commit`],
/// again from `reset` while the commit says [`Commit::Retry`].
pub struct Stm<'a> {
    kv: &'a mut KvClient<Conn>,
    isolation: Isolation,
    reads: BTreeMap<Bytes, Read>,
    writes: BTreeMap<Bytes, Bytes>,
    /// The serializable levels' reads from the failed commit, taken instead of asking again.
    prefetch: BTreeMap<Bytes, Read>,
    /// The serializable levels' read revision: that of the attempt's first read.
    read_revision: Option<i64>,
}

impl<'a> Stm<'a> {
    pub fn new(kv: &'a mut KvClient<Conn>, isolation: Isolation) -> Self {
        Self {
            kv,
            isolation,
            reads: BTreeMap::new(),
            writes: BTreeMap::new(),
            prefetch: BTreeMap::new(),
            read_revision: None,
        }
    }

    pub fn reset(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }

    /// Reads `key` into the read set (a key this attempt wrote or read is not asked again).
    pub async fn get(&mut self, key: &Bytes) -> Result<(), Status> {
        if self.writes.contains_key(key) || self.reads.contains_key(key) {
            return Ok(());
        }
        let first = self.reads.is_empty();
        if let Some(read) = self.prefetch.remove(key) {
            self.reads.insert(key.clone(), read);
        } else {
            let (revision, serializable) = match (self.isolation.serializable(), self.read_revision) {
                (true, Some(rev)) => (rev, true),
                (true, None) => (0, false),
                (false, _) => (0, true),
            };
            let range = RangeRequest { key: key.clone(), revision, serializable, ..Default::default() };
            let txn = TxnRequest { success: vec![range_op(range)], ..Default::default() };
            let r = self.kv.txn(txn).await?.into_inner();
            let read = reads_of(&r).into_iter().next().unwrap_or(Read { mod_revision: 0, revision: 0 });
            self.reads.insert(key.clone(), read);
        }
        if first && self.isolation.serializable() {
            self.read_revision = self.reads.get(key).map(|r| r.revision);
        }
        Ok(())
    }

    pub fn put(&mut self, key: Bytes, value: Bytes) {
        self.writes.insert(key, value);
    }

    /// The commit's Txn: the compares of the isolation level, the writes on success and, for
    /// the serializable levels, a read of every read key on failure.
    fn commit_request(&self) -> TxnRequest {
        let mod_is = |key, result, revision| compare(key, result, TargetUnion::ModRevision(revision));
        let mut compares = Vec::new();
        if self.isolation != Isolation::ReadCommitted {
            compares.extend(self.reads.iter().map(|(k, r)| mod_is(k, CompareResult::Equal, r.mod_revision)));
        }
        if self.isolation == Isolation::SerializableSnapshot {
            let first = self.reads.values().map(|r| r.revision).min().unwrap_or(i64::MAX - 1);
            compares.extend(self.writes.keys().map(|k| mod_is(k, CompareResult::Less, first + 1)));
        }
        let success = self.writes.iter().map(|(key, value)| put_op(key.clone(), value.clone())).collect();
        let reads = self.reads.keys().filter(|_| self.isolation.serializable());
        let failure =
            reads.map(|key| range_op(RangeRequest { key: key.clone(), ..Default::default() })).collect();
        TxnRequest { compare: compares, success, failure }
    }

    pub async fn commit(&mut self) -> Result<Commit, Status> {
        let txn = self.commit_request();
        let r = self.kv.txn(txn).await?.into_inner();
        if r.succeeded {
            return Ok(Commit::Done);
        }
        if self.isolation.serializable() {
            self.prefetch = self.reads.keys().cloned().zip(reads_of(&r)).collect();
            self.read_revision = None;
        }
        Ok(Commit::Retry)
    }
}

/// What each range of a Txn's answer saw: the first key's mod revision, at the Txn's revision.
fn reads_of(r: &TxnResponse) -> Vec<Read> {
    let revision = r.header.as_ref().map_or(0, |h| h.revision);
    let read = |range: &RangeResponse| Read {
        mod_revision: range.kvs.first().map_or(0, |kv| kv.mod_revision),
        revision,
    };
    r.responses.iter().filter_map(|op| range_of(Some(op)).map(read)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stm_with(isolation: Isolation, kv: &mut KvClient<Conn>) -> Stm<'_> {
        let mut s = Stm::new(kv, isolation);
        s.reads.insert(Bytes::from_static(b"a"), Read { mod_revision: 7, revision: 9 });
        s.reads.insert(Bytes::from_static(b"b"), Read { mod_revision: 0, revision: 11 });
        s.put(Bytes::from_static(b"a"), Bytes::from_static(b"v"));
        s
    }

    fn compares(t: &TxnRequest) -> Vec<(Vec<u8>, i32, i64)> {
        t.compare
            .iter()
            .map(|c| {
                let rev = match c.target_union {
                    Some(TargetUnion::ModRevision(r)) => r,
                    _ => -1,
                };
                (c.key.to_vec(), c.result, rev)
            })
            .collect()
    }

    #[tokio::test]
    async fn each_level_guards_what_etcd_guards() {
        let channel =
            crate::conn::plain(tonic::transport::Channel::from_static("http://127.0.0.1:1").connect_lazy());
        let mut kv = KvClient::new(channel);
        let eq = CompareResult::Equal as i32;
        let lt = CompareResult::Less as i32;

        let t = stm_with(Isolation::ReadCommitted, &mut kv).commit_request();
        assert!(t.compare.is_empty() && t.failure.is_empty());
        assert_eq!(t.success.len(), 1);

        let t = stm_with(Isolation::RepeatableReads, &mut kv).commit_request();
        assert_eq!(compares(&t), vec![(b"a".to_vec(), eq, 7), (b"b".to_vec(), eq, 0)]);
        assert!(t.failure.is_empty());

        let t = stm_with(Isolation::Serializable, &mut kv).commit_request();
        assert_eq!(compares(&t).len(), 2);
        assert_eq!(t.failure.len(), 2, "the read set is read again on failure");

        // The first read was at revision 9: a written key modified after it fails the commit.
        let t = stm_with(Isolation::SerializableSnapshot, &mut kv).commit_request();
        assert_eq!(compares(&t)[2], (b"a".to_vec(), lt, 10));
    }

    #[test]
    fn isolation_flags_are_etcds() {
        use clap::ValueEnum;
        use Isolation::*;
        let parsed = ["c", "r", "s", "ss"].map(|s| Isolation::from_str(s, false));
        assert_eq!(parsed, [ReadCommitted, RepeatableReads, Serializable, SerializableSnapshot].map(Ok));
        assert!(Isolation::from_str("x", false).is_err());
    }
}
