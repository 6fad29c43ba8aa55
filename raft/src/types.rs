//! What actcd's Raft log carries, and the type configuration that tells openraft so.
//!
//! A log entry's payload is a [`Proposal`]: the writes one member batched while its previous
//! proposal was in flight, the same way the single node formed a group commit. One entry per
//! batch means one log append and one fsync per batch however many clients wrote (openraft
//! 0.9 appends each proposed entry with its own flush). Each command travels in etcd's
//! protobuf encoding behind a one-byte tag ([`Command::encode`]); the entry around it, and
//! openraft's own records (votes, log ids, memberships), in postcard.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use actcd_store::{Command, CommandResponse, StoreError};

openraft::declare_raft_types!(
    /// actcd's choice of openraft's types: etcd member ids as node ids, a member's name and
    /// URLs as its node record, checkpoint directories as snapshots.
    pub TypeConfig:
        D = Proposal,
        R = Applied,
        NodeId = u64,
        Node = MemberNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotFiles,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// One log entry's writes, applied in order, each its own revision (or none, if it changes
/// no key), exactly as the single node applied one group commit.
#[derive(Debug, Clone, Default)]
pub struct Proposal {
    /// The member that batched these writes: a NOSPACE alarm a write of the batch raises is
    /// raised for this member on every member, so apply picks no id of its own.
    pub proposer: u64,
    /// The writes, in the order they were queued.
    pub commands: Vec<Command>,
    /// The commands' wire encoding, made once and shared by every clone: an entry is
    /// serialized for the log and again for every follower's append, and a follower writes
    /// the bytes it received to its own log, so each command is encoded once in the cluster
    /// (the entry's clones held in memory share it).
    wire: Arc<OnceLock<Vec<Vec<u8>>>>,
}

impl Proposal {
    /// The writes `commands`, batched by member `proposer`.
    pub fn new(proposer: u64, commands: Vec<Command>) -> Self {
        Self { proposer, commands, wire: Arc::default() }
    }
}

impl PartialEq for Proposal {
    fn eq(&self, other: &Self) -> bool {
        self.proposer == other.proposer && self.commands == other.commands
    }
}

/// The answers to one entry's commands, in order (none for a blank or membership entry).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Applied(pub Vec<Result<CommandResponse, StoreError>>);

/// A member as the Raft membership records it: what etcd's MemberList shows.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemberNode {
    /// `--name`.
    pub name: String,
    /// `--initial-advertise-peer-urls`.
    pub peer_urls: Vec<String>,
    /// `--advertise-client-urls`.
    pub client_urls: Vec<String>,
}

impl fmt::Display for MemberNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.name, self.peer_urls)
    }
}

/// A snapshot of the state machine: a RocksDB checkpoint directory (hard links to the SST
/// files of the moment it was taken), sent to a member that fell behind the purged log.
#[derive(Debug, Clone)]
pub struct SnapshotFiles {
    /// Where the checkpoint lives.
    pub dir: PathBuf,
    /// Keeps `dir` on disk while this value (or a clone) lives, though a newer snapshot
    /// replaces it: a leader may still be streaming it to a follower. None for a directory
    /// that is not among the kept snapshots (one being received).
    pub in_use: Option<std::sync::Arc<InUse>>,
}

/// Holds a snapshot directory on disk while it lives (it is inside every [`SnapshotFiles`]
/// the snapshot store hands out); a later build removes the directory once nothing holds it.
#[derive(Debug)]
pub struct InUse {
    /// The directory held.
    pub(crate) dir: PathBuf,
}

impl SnapshotFiles {
    /// `dir`, not held by anyone.
    pub fn unheld(dir: PathBuf) -> Self {
        Self { dir, in_use: None }
    }
}

/// [`Proposal`] on the wire and in the log.
#[derive(Serialize, Deserialize)]
struct ProposalWire<C> {
    proposer: u64,
    commands: C,
}

impl Serialize for Proposal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let commands = self.wire.get_or_init(|| self.commands.iter().map(Command::encode).collect());
        ProposalWire { proposer: self.proposer, commands }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Proposal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = ProposalWire::<Vec<Vec<u8>>>::deserialize(deserializer)?;
        let commands = wire
            .commands
            .iter()
            .map(|bytes| Command::decode(bytes))
            .collect::<Result<_, _>>()
            .map_err(serde::de::Error::custom)?;
        Ok(Proposal { proposer: wire.proposer, commands, wire: Arc::new(OnceLock::from(wire.commands)) })
    }
}

impl Serialize for Applied {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire: Vec<Result<Vec<u8>, &StoreError>> =
            self.0.iter().map(|answer| answer.as_ref().map(CommandResponse::encode)).collect();
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Applied {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Vec::<Result<Vec<u8>, StoreError>>::deserialize(deserializer)?;
        let answers = wire
            .into_iter()
            .map(|answer| match answer {
                Ok(bytes) => CommandResponse::decode(&bytes).map(Ok),
                Err(err) => Ok(Err(err)),
            })
            .collect::<Result<_, _>>()
            .map_err(serde::de::Error::custom)?;
        Ok(Applied(answers))
    }
}

/// Encodes one of openraft's records (or a log entry) for the log store and the peer wire.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_stdvec(value)
}

/// Decodes what [`encode`] wrote.
pub fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{PutRequest, PutResponse, ResponseHeader};

    #[test]
    fn a_proposal_and_its_answers_survive_the_log_encoding() {
        let put =
            PutRequest { key: "k".into(), value: vec![0, 1, 255].into(), lease: 7, ..Default::default() };
        let as_alice = Command::Put(put.clone())
            .from_caller(actcd_store::auth_store::Caller::User { name: "alice".into(), auth_revision: 7 });
        let revoke = Command::LeaseRevoke(actcd_proto::etcdserverpb::LeaseRevokeRequest { id: 3 })
            .from_caller(actcd_store::auth_store::Caller::Member);
        let proposal = Proposal::new(42, vec![Command::Put(put), as_alice, revoke]);
        let bytes = encode(&proposal).expect("encodes");
        assert_eq!(decode::<Proposal>(&bytes).expect("decodes"), proposal);

        let header = Some(ResponseHeader { revision: 9, ..Default::default() });
        let applied = Applied(vec![
            Ok(CommandResponse::Put(PutResponse { header, prev_kv: None })),
            Err(StoreError::NoSpace),
        ]);
        let bytes = encode(&applied).expect("encodes");
        assert_eq!(decode::<Applied>(&bytes).expect("decodes"), applied);
        assert!(decode::<Proposal>(&[1, 1, 3, 99, 0, 0]).is_err(), "an unknown command tag is refused");
    }
}
