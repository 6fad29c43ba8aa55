//! The network of a one-member cluster. A single member never sends a Raft message (it
//! votes for itself and commits alone), so every call here answers "unreachable": reaching
//! one would mean the membership names a peer this build cannot talk to, which the flags
//! refuse at start.

use std::future::Future;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, Snapshot, Vote};

use actcd_actors::raft::types::{MemberNode, TypeConfig};

/// Hands out [`NoPeer`]s.
pub struct SingleMember;

/// The connection to a peer that does not exist.
pub struct NoPeer(u64);

impl NoPeer {
    fn error(&self) -> NetworkError {
        NetworkError::new(&std::io::Error::other(format!("member {:x} has no peer transport", self.0)))
    }
}

impl RaftNetworkFactory<TypeConfig> for SingleMember {
    type Network = NoPeer;

    async fn new_client(&mut self, target: u64, _node: &MemberNode) -> NoPeer {
        NoPeer(target)
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&self.error())))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        Err(RPCError::Unreachable(Unreachable::new(&self.error())))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote<u64>,
        _snapshot: Snapshot<TypeConfig>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<TypeConfig, Fatal<u64>>> {
        Err(StreamingError::Network(self.error()))
    }
}
