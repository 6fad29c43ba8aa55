//! The peer transport: gRPC between the members of a cluster (the `actcdpeerpb.Peer` service),
//! carrying openraft's messages, the calls a follower forwards to its leader, and snapshots.
//! A message's body is postcard bytes of openraft's own types, in a frame that names the
//! sender's cluster and id.
//!
//! # Layout
//! - [`peers`]: the client half (replication, and what followers forward).
//! - [`raft_stream`]: Raft's calls to a peer on one long-lived stream, answered in order.
//! - [`peer_service`]: the server half, on `--listen-peer-urls`.
//! - [`snapshot_stream`]: a checkpoint's files streamed to a member that fell behind.
//! - [`tls_connector`]: the dialer of https peer URLs, with the TLS configuration the edge built.

pub mod peer_service;
pub mod peers;
pub mod raft_stream;
pub mod snapshot_stream;
pub mod tls_connector;

/// openraft's `RaftNetwork` for `$link`, a link to one member that carries a call with its own
/// `unary(&request, &option, call)` (`call` is handed what reaches the target and the request
/// as it arrives there) and a snapshot with its own `send_snapshot(vote, snapshot)`; a remote
/// Raft's refusal comes back as openraft's `RemoteError`, from `$link`'s `target` and `node`.
macro_rules! raft_network {
    ($link:ty) => {
        $crate::network::raft_network!(@calls $link;
            append_entries(openraft::raft::AppendEntriesRequest<$crate::types::TypeConfig>)
                -> openraft::raft::AppendEntriesResponse<u64>,
            vote(openraft::raft::VoteRequest<u64>) -> openraft::raft::VoteResponse<u64>,
        );
    };
    (@calls $link:ty; $($rpc:ident($request:ty) -> $response:ty,)*) => {
        impl openraft::network::RaftNetwork<$crate::types::TypeConfig> for $link {
            $(async fn $rpc(
                &mut self,
                rpc: $request,
                option: openraft::network::RPCOption,
            ) -> Result<
                $response,
                openraft::error::RPCError<u64, $crate::types::MemberNode, openraft::error::RaftError<u64>>,
            > {
                self.unary(&rpc, &option, async |to, rpc| to.$rpc(rpc).await).await
            })*

            async fn full_snapshot(
                &mut self,
                vote: openraft::Vote<u64>,
                snapshot: openraft::Snapshot<$crate::types::TypeConfig>,
                cancel: impl std::future::Future<Output = openraft::error::ReplicationClosed>
                    + openraft::OptionalSend
                    + 'static,
                _option: openraft::network::RPCOption,
            ) -> Result<
                openraft::raft::SnapshotResponse<u64>,
                openraft::error::StreamingError<$crate::types::TypeConfig, openraft::error::Fatal<u64>>,
            > {
                use openraft::error::{RemoteError, StreamingError};
                let answer = tokio::select! {
                    answer = self.send_snapshot(vote, snapshot) => answer?,
                    closed = cancel => return Err(StreamingError::Closed(closed)),
                };
                answer.map_err(|fatal| {
                    StreamingError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), fatal))
                })
            }
        }
    };
}
pub(crate) use raft_network;
