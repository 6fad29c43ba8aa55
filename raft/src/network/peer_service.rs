//! The server half of the peer transport, on `--listen-peer-urls`: Raft's messages handed to
//! this member's openraft, and the calls followers forward to a leader (their write batches,
//! read index requests, membership changes), and the membership to a member that asks. A frame
//! from another cluster is refused before anything in it is read, as etcd's rafthttp refuses a
//! cluster ID mismatch, and so is one from a removed member, with the words that tell it so.

use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::storage::Snapshot;
use openraft::{SnapshotMeta, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use actix::Addr;

use crate::reconfig::{Change, Members};
use crate::removed::{Removed, REMOVED_TEXT};
use crate::route::Route;
use crate::snapshot_store::SnapshotStore;
use crate::types::{decode, encode, MemberNode, Proposal, SnapshotFiles, TypeConfig};
use actcd_actors::lease::actor::LeaseActor;
use actcd_actors::lease::messages::{Remaining, Renew};
use actcd_proto::actcdpeerpb::peer_server::Peer;
use actcd_proto::actcdpeerpb::{Frame, SnapshotChunk};
use actcd_store::StoreError;
use tonic::codegen::BoxStream as PeerStream;

use super::raft_stream::{self, RaftCall};
use super::snapshot_stream;
use crate::cluster::corrupt_check::Hasher;
use crate::cluster::reconfigure::Reconfigurer;

/// What a member answers its peers.
#[derive(Clone)]
pub struct PeerService {
    /// Where Raft's messages and the forwarded calls go.
    pub route: Route,
    /// Frames of other clusters are refused.
    pub cluster_id: u64,
    /// Where received snapshots are unpacked.
    pub snapshots: SnapshotStore,
    /// What answers the lease questions.
    pub leases: Addr<LeaseActor>,
    /// What makes the membership changes.
    pub reconfigurer: std::sync::Arc<Reconfigurer>,
    /// Frames of these members are refused.
    pub removed: Removed,
    /// What answers the corruption checks.
    pub hasher: Hasher,
    /// Counts the followers' calls being served.
    pub forwarding: Forwarding,
}

/// The followers' writes and read index requests this member is serving: a leader that hands
/// its leadership over before it stops answers them (through the new leader) before it exits,
/// so that a follower sees no write lost with the old leader.
#[derive(Clone, Default)]
pub struct Forwarding(std::sync::Arc<std::sync::atomic::AtomicUsize>);

/// One forwarded call being served.
struct Serving(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Forwarding {
    fn serving(&self) -> Serving {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Serving(std::sync::Arc::clone(&self.0))
    }

    /// Waits until no forwarded call is being served, at most `within`.
    pub async fn drained(&self, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.0.load(std::sync::atomic::Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl PeerService {
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

    /// etcd's peers answer a removed member so that it learns and stops.
    fn check_member(&self, from: u64) -> Result<(), Status> {
        if self.removed.contains(from) {
            return Err(Status::failed_precondition(REMOVED_TEXT));
        }
        Ok(())
    }

    fn open<T: DeserializeOwned>(&self, request: Request<Frame>) -> Result<(u64, T), Status> {
        self.open_frame(request.into_inner())
    }

    fn open_frame<T: DeserializeOwned>(&self, frame: Frame) -> Result<(u64, T), Status> {
        self.check_cluster(frame.cluster_id)?;
        self.check_member(frame.from)?;
        metrics::counter!(actcd_store::metric_names::ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL, "From" => format!("{:x}", frame.from))
            .increment(frame.body.len() as u64);
        let body =
            decode(&frame.body).map_err(|e| Status::invalid_argument(format!("bad peer message: {e}")))?;
        Ok((frame.from, body))
    }

    fn answer<T: Serialize>(&self, to: u64, body: &T) -> Result<Response<Frame>, Status> {
        let body = encode(body).map_err(|e| Status::internal(format!("cannot encode a peer answer: {e}")))?;
        metrics::counter!(actcd_store::metric_names::ETCD_NETWORK_PEER_SENT_BYTES_TOTAL, "To" => format!("{to:x}"))
            .increment(body.len() as u64);
        Ok(Response::new(Frame {
            cluster_id: self.cluster_id,
            from: self.route.member_id(),
            body: body.into(),
            seq: 0,
        }))
    }

    /// One call of the Raft stream.
    async fn raft_call(&self, frame: Frame) -> Result<Frame, Status> {
        let raft = self.route.raft();
        let answer = match self.open_frame(frame)? {
            (from, RaftCall::Append(rpc)) => self.answer(from, &raft.append_entries(rpc).await),
            (from, RaftCall::Vote(rpc)) => self.answer(from, &raft.vote(rpc).await),
        };
        answer.map(Response::into_inner)
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn raft(&self, request: Request<Streaming<Frame>>) -> Result<Response<PeerStream<Frame>>, Status> {
        let service = std::sync::Arc::new(self.clone());
        let answers = raft_stream::in_order(request.into_inner(), move |frame| {
            let service = std::sync::Arc::clone(&service);
            async move { service.raft_call(frame).await }
        });
        Ok(Response::new(Box::pin(answers)))
    }

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
        let _serving = self.forwarding.serving();
        self.answer(from, &self.route.propose_forwarded(proposal).await)
    }

    async fn read_index(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, ()): (_, ()) = self.open(request)?;
        let _serving = self.forwarding.serving();
        self.answer(from, &self.route.read_index_forwarded().await)
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

    async fn reconfigure(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, change): (_, Change) = self.open(request)?;
        // A member publishes only its own record.
        if matches!(&change, Change::Publish { id, .. } if *id != from) {
            return Err(Status::permission_denied("a member publishes only its own record"));
        }
        self.answer(from, &self.reconfigurer.apply(change).await)
    }

    async fn members(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let frame = request.into_inner();
        // A joining member does not know the cluster yet: it names cluster 0.
        if frame.cluster_id != 0 {
            self.check_cluster(frame.cluster_id)?;
        }
        self.check_member(frame.from)?;
        let members = {
            let metrics = self.route.raft().metrics();
            let metrics = metrics.borrow();
            Members::of(metrics.membership_config.membership(), self.removed.ids())
        };
        self.answer(frame.from, &members)
    }

    async fn hash_kv(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, revision): (_, i64) = self.open(request)?;
        self.answer(from, &self.hasher.hash_at(revision).await)
    }

    async fn timeout_now(&self, request: Request<Frame>) -> Result<Response<Frame>, Status> {
        let (from, ()): (_, ()) = self.open(request)?;
        tracing::info!(leader = %format!("{from:x}"), "the leader hands its leadership over: campaigning now");
        let started =
            self.route.raft().trigger().elect().await.map_err(|e| StoreError::Stopped(e.to_string()));
        self.answer(from, &started)
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
