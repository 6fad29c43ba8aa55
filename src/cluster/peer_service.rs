//! The server half of the peer transport, on `--listen-peer-urls`: Raft's messages handed to
//! this member's openraft, and the calls followers forward to a leader (their write batches,
//! read index requests, their own records). A frame from another cluster is refused before
//! anything in it is read, as etcd's rafthttp refuses a cluster ID mismatch.

use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::storage::Snapshot;
use openraft::{SnapshotMeta, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use actix::Addr;

use actcd_actors::lease::actor::LeaseActor;
use actcd_actors::lease::messages::{Remaining, Renew};
use actcd_actors::raft::route::Route;
use actcd_actors::raft::snapshot_store::SnapshotStore;
use actcd_actors::raft::types::{decode, encode, MemberNode, Proposal, SnapshotFiles, TypeConfig};
use actcd_actors::store::StoreError;
use actcd_proto::actcdpeerpb::peer_server::Peer;
use actcd_proto::actcdpeerpb::{Frame, SnapshotChunk};

use super::publish;
use super::snapshot_stream;

/// What a member answers its peers.
pub struct PeerService {
    route: Route,
    cluster_id: u64,
    snapshots: SnapshotStore,
    leases: Addr<LeaseActor>,
}

impl PeerService {
    /// Serves the peers of `route`'s member of cluster `cluster_id`; received snapshots are
    /// unpacked among `snapshots`; lease questions go to `leases`.
    pub fn new(route: Route, cluster_id: u64, snapshots: SnapshotStore, leases: Addr<LeaseActor>) -> Self {
        Self { route, cluster_id, snapshots, leases }
    }

    fn check_cluster(&self, cluster_id: u64) -> Result<(), Status> {
        if cluster_id == self.cluster_id {
            Ok(())
        } else {
            Err(Status::failed_precondition(format!(
                "cluster ID mismatch: this member is of cluster {:x}, the message of {cluster_id:x}",
                self.cluster_id
            )))
        }
    }

    fn open<T: DeserializeOwned>(&self, request: Request<Frame>) -> Result<(u64, T), Status> {
        let frame = request.into_inner();
        self.check_cluster(frame.cluster_id)?;
        metrics::counter!(actcd_actors::metric_names::ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL, "From" => format!("{:x}", frame.from))
            .increment(frame.body.len() as u64);
        let body =
            decode(&frame.body).map_err(|e| Status::invalid_argument(format!("bad peer message: {e}")))?;
        Ok((frame.from, body))
    }

    fn answer<T: Serialize>(&self, to: u64, body: &T) -> Result<Response<Frame>, Status> {
        let body = encode(body).map_err(|e| Status::internal(format!("cannot encode a peer answer: {e}")))?;
        metrics::counter!(actcd_actors::metric_names::ETCD_NETWORK_PEER_SENT_BYTES_TOTAL, "To" => format!("{to:x}"))
            .increment(body.len() as u64);
        Ok(Response::new(Frame {
            cluster_id: self.cluster_id,
            from: self.route.member_id(),
            body: body.into(),
        }))
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn append_entries(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, rpc): (_, AppendEntriesRequest<TypeConfig>) = self.open(request)?;
        self.answer(from, &self.route.raft().append_entries(rpc).await)
    }

    async fn vote(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, rpc): (_, VoteRequest<u64>) = self.open(request)?;
        self.answer(from, &self.route.raft().vote(rpc).await)
    }

    async fn snapshot(&self, request: Request<Streaming<SnapshotChunk>>) -> Result<Response<Frame>, Status> {
        let dir = self.snapshots.receiving_dir();
        let received = snapshot_stream::receive(request.into_inner(), &dir).await;
        let result = match received {
            Ok((cluster_id, from, header)) => match self.check_cluster(cluster_id) {
                Ok(()) => self.install(from, &header, dir.clone()).await,
                Err(status) => Err(status),
            },
            Err(status) => Err(status),
        };
        // Installed, the directory became the current snapshot; otherwise it is dropped.
        if dir.exists() {
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
        result
    }

    async fn propose(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, proposal): (_, Proposal) = self.open(request)?;
        self.answer(from, &self.route.propose_as_leader(proposal).await)
    }

    async fn read_index(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, ()): (_, ()) = self.open(request)?;
        self.answer(from, &self.route.read_index_as_leader().await)
    }

    async fn lease_renew(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, id): (_, i64) = self.open(request)?;
        let answer = self.leases.send(Renew { id, forwarded: true }).await;
        self.answer(from, &answer.unwrap_or_else(|_| Err(StoreError::Stopped("lease actor gone".into()))))
    }

    async fn lease_remaining(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, id): (_, i64) = self.open(request)?;
        let answer = self.leases.send(Remaining { id, forwarded: true }).await;
        self.answer(from, &answer.unwrap_or_else(|_| Err(StoreError::Stopped("lease actor gone".into()))))
    }

    async fn publish(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, node): (_, MemberNode) = self.open(request)?;
        self.answer(from, &publish::set_node(self.route.raft(), from, node).await)
    }
}

impl PeerService {
    async fn install(
        &self,
        from: u64,
        header: &[u8],
        dir: std::path::PathBuf,
    ) -> Result<Response<Frame>, Status> {
        let (vote, meta): (Vote<u64>, SnapshotMeta<u64, MemberNode>) =
            decode(header).map_err(|e| Status::invalid_argument(format!("bad snapshot header: {e}")))?;
        if !SnapshotStore::is_complete(&dir, &meta) {
            // Refused here, not by the state machine: openraft takes an install that fails
            // as a storage fault and stops this member; a refused send is tried again.
            return Err(Status::data_loss(format!("snapshot {} arrived incomplete", meta.snapshot_id)));
        }
        let snapshot = Snapshot { meta, snapshot: Box::new(SnapshotFiles::unheld(dir)) };
        self.answer(from, &self.route.raft().install_full_snapshot(vote, snapshot).await)
    }
}
