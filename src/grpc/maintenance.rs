//! The Maintenance and Cluster services: Status, Alarm, HashKV, Hash, Defragment and Snapshot
//! as etcd answers them on one member; MoveLeader; MemberList and the membership changes, made
//! by the cluster's [`Reconfigurer`]; a clear error for downgrades.

use actcd_edge::status::{
    raw_auth_status, snapshot_failed, task_status, to_status, unknown_alarm_action, Unsupported,
};
use actcd_edge::SERVER_VERSION;
use actcd_proto::errors::EtcdError;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Status};

use std::sync::Arc;

use actcd_raft::reconfig::Change;
use actcd_store::auth_store::Need;
use actcd_store::backend::engine::Engine;
use actcd_store::mvcc::hash;
use std::io::Write as _;

use actcd_proto::etcdserverpb::{
    alarm_request::AlarmAction, AlarmRequest, AlarmResponse, AlarmType, DefragmentRequest,
    DefragmentResponse, DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest,
    HashResponse, Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse, ResponseHeader,
    SnapshotRequest, SnapshotResponse, StatusRequest, StatusResponse,
};
use actcd_store::RocksEngine;
use sha2::{Digest, Sha256};

use crate::etcd_file::export::{EtcdExport, ExportError};
use crate::grpc::store_handle::StoreHandle;
use actcd_raft::cluster::move_leader::LeaderMover;
use actcd_raft::cluster::reconfigure::Reconfigurer;

/// The storage version reported by Status.
pub const STORAGE_VERSION: &str = "3.6.0";

/// Snapshot chunks carry this many bytes, as etcd's do.
const SNAPSHOT_CHUNK: usize = 32 * 1024;
/// Chunks made ahead of a slow snapshot client; when they are all waiting, the writer waits.
const SNAPSHOT_QUEUE: usize = 4;

/// What changes the membership and moves the leader.
#[derive(Clone)]
pub struct ClusterOps {
    /// Membership changes.
    pub reconfigurer: Arc<Reconfigurer>,
    /// MoveLeader.
    pub mover: LeaderMover,
}

/// Maintenance and Cluster services over one store.
#[derive(Clone)]
pub struct MaintenanceService {
    pub(super) store: StoreHandle,
    quota_bytes: u64,
    cluster: ClusterOps,
}

impl MaintenanceService {
    /// Services over `store`, which NOSPACE fills at `quota_bytes`, changing the membership
    /// and the leader with `cluster`.
    pub fn new(store: StoreHandle, quota_bytes: u64, cluster: ClusterOps) -> Self {
        Self { store, quota_bytes, cluster }
    }

    /// The members, as the membership records them, in id order as etcd lists them.
    fn members(&self) -> Vec<Member> {
        let metrics = self.store.route.raft().metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        membership
            .nodes()
            .map(|(id, node)| Member {
                id: *id,
                name: node.name.clone(),
                peer_ur_ls: node.peer_urls.clone(),
                client_ur_ls: node.client_urls.clone(),
                is_learner: !membership.voter_ids().any(|v| v == *id),
            })
            .collect()
    }

    /// Runs blocking engine work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(StoreHandle) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(store)).await.map_err(task_status)?
    }
}

/// Peer URLs as etcd's MemberAdd and MemberUpdate take them (types.NewURLs): each
/// `http(s)://host:port` with no path, at least one, sorted.
fn peer_urls(urls: &[String]) -> Result<Vec<String>, Status> {
    let mut parsed: Vec<String> = urls
        .iter()
        .map(|u| actcd_raft::cluster::initial_cluster::normalize(u))
        .collect::<Result<_, _>>()
        .map_err(|_| EtcdError::MemberBadUrls.status())?;
    if parsed.is_empty() {
        return Err(EtcdError::MemberBadUrls.status());
    }
    parsed.sort();
    Ok(parsed)
}

/// The time left before the client's `grpc-timeout`, if it sent one.
fn request_deadline<T>(request: &Request<T>) -> Option<std::time::Duration> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (amount, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = amount.parse().ok()?;
    let nanos_per = match unit {
        "H" => 3_600_000_000_000,
        "M" => 60_000_000_000,
        "S" => 1_000_000_000,
        "m" => 1_000_000,
        "u" => 1_000,
        "n" => 1,
        _ => return None,
    };
    Some(std::time::Duration::from_nanos(amount.saturating_mul(nanos_per)))
}

/// Streams the store as etcd's backend file in etcd's framing: chunks with the bytes still
/// to come, then the SHA-256 of them all. The file is made as it is sent, from one RocksDB
/// snapshot ([`EtcdExport`]); it stops when the client goes away.
fn send_snapshot(
    engine: &RocksEngine,
    header: Option<ResponseHeader>,
    out: mpsc::Sender<Result<SnapshotResponse, Status>>,
) {
    let sent = EtcdExport::prepare(engine).and_then(|export| {
        let mut chunks = SnapshotChunks {
            out: &out,
            header,
            remaining: export.bytes(),
            chunk: Vec::new(),
            hash: Sha256::new(),
        };
        export.write_to(&mut chunks)?;
        chunks.flush()?;
        Ok(chunks.hash.finalize())
    });
    match sent {
        Ok(sha) => {
            let checksum = SnapshotResponse {
                header: None,
                remaining_bytes: 0,
                blob: Bytes::copy_from_slice(&sha),
                version: STORAGE_VERSION.into(),
            };
            let _ = out.blocking_send(Ok(checksum));
        }
        Err(ExportError::Io(err)) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            tracing::info!("snapshot client went away");
        }
        Err(err) => {
            tracing::error!(%err, "snapshot failed");
            let _ = out.blocking_send(Err(snapshot_failed(err)));
        }
    }
}

/// The snapshot's bytes cut into etcd's chunks as they are written, each sent when full (the
/// channel holds [`SNAPSHOT_QUEUE`] of them: a slow client holds the writer back).
struct SnapshotChunks<'a> {
    out: &'a mpsc::Sender<Result<SnapshotResponse, Status>>,
    header: Option<ResponseHeader>,
    remaining: u64,
    chunk: Vec<u8>,
    hash: Sha256,
}

impl std::io::Write for SnapshotChunks<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.chunk.capacity() == 0 {
            self.chunk.reserve_exact(SNAPSHOT_CHUNK);
        }
        let n = bytes.len().min(SNAPSHOT_CHUNK - self.chunk.len());
        self.chunk.extend_from_slice(&bytes[..n]);
        if self.chunk.len() == SNAPSHOT_CHUNK {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let blob = std::mem::take(&mut self.chunk);
        self.hash.update(&blob);
        self.remaining = self.remaining.saturating_sub(blob.len() as u64);
        let message = SnapshotResponse {
            header: self.header.take(),
            remaining_bytes: self.remaining,
            blob: Bytes::from(blob),
            version: STORAGE_VERSION.into(),
        };
        self.out
            .blocking_send(Ok(message))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the snapshot client went away"))
    }
}

/// The handlers of the calls (`crate::grpc::services`).
impl MaintenanceService {
    pub(super) async fn alarms(&self, request: Request<AlarmRequest>) -> Result<AlarmResponse, Status> {
        // Listing needs a user; raising or clearing, the root role (checked with the command).
        let who = self.store.who(&request).await?;
        who.need(Need::User)?;
        let req = request.into_inner();
        let action = AlarmAction::try_from(req.action).map_err(|_| unknown_alarm_action(req.action))?;
        let alarms = match action {
            // etcd's alarm store knows no other types; an unknown one matches nothing.
            AlarmAction::Get => self
                .store
                .view
                .alarms(AlarmType::try_from(req.alarm).unwrap_or(AlarmType::None))
                .map_err(to_status)?,
            AlarmAction::Activate | AlarmAction::Deactivate => self.store.write(&who, req).await?.alarms,
        };
        // etcd's Alarm answer carries no header: its applier builds the response without one
        // and its maintenance server fills none in (seen on 3.4.23's gateway: `{}`).
        Ok(AlarmResponse { header: None, alarms })
    }

    pub(super) async fn member_status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<StatusResponse, Status> {
        // A user, not the root role (etcd 3.4.42 on asks root): `etcdctl endpoint status` and
        // the apiserver's probe run as ordinary users.
        self.store.who(&request).await?.need(Need::User)?;
        let db_size = self.store.engine.size_bytes();
        let in_use = self.store.engine.live_bytes().min(db_size);
        let raft = self.store.route.raft().metrics().borrow().clone();
        let applied = raft.last_applied.map_or(0, |id| id.index);
        let errors = self
            .store
            .view
            .alarms(AlarmType::None)
            .map_err(to_status)?
            .into_iter()
            .map(|a| {
                let name = AlarmType::try_from(a.alarm).map_or("UNKNOWN", |t| t.as_str_name());
                // The text form etcd's Go proto prints, trailing space included.
                format!("memberID:{} alarm:{} ", a.member_id, name)
            })
            .collect();
        Ok(StatusResponse {
            header: self.store.header(),
            version: SERVER_VERSION.into(),
            db_size: i64::try_from(db_size).unwrap_or(i64::MAX),
            leader: raft.current_leader.unwrap_or(0),
            raft_index: raft.last_log_index.unwrap_or(0),
            raft_term: raft.current_term,
            raft_applied_index: applied,
            errors,
            db_size_in_use: i64::try_from(in_use).unwrap_or(i64::MAX),
            is_learner: self.store.is_learner(),
            storage_version: STORAGE_VERSION.into(),
            db_size_quota: i64::try_from(self.quota_bytes).unwrap_or(i64::MAX),
            downgrade_info: None,
        })
    }

    pub(super) async fn defragment_engine(
        &self,
        request: Request<DefragmentRequest>,
    ) -> Result<DefragmentResponse, Status> {
        self.admin_raw(&request).await?;
        self.blocking(|store| {
            store.engine.compact_all().map_err(to_status)?;
            store.view.refresh_db_size();
            Ok(())
        })
        .await?;
        Ok(DefragmentResponse { header: self.store.header() })
    }

    pub(super) async fn hash_engine(&self, request: Request<HashRequest>) -> Result<HashResponse, Status> {
        self.admin_raw(&request).await?;
        let header = self.store.header();
        let hash = self.blocking(|store| hash::hash_all(&store.engine).map_err(to_status)).await?;
        Ok(HashResponse { header, hash })
    }

    pub(super) async fn hash_history(
        &self,
        request: Request<HashKvRequest>,
    ) -> Result<HashKvResponse, Status> {
        self.admin_raw(&request).await?;
        let revision = request.get_ref().revision;
        let current = self.store.view.revision();
        let compacted = self.store.view.compacted_revision();
        let hashed = self
            .blocking(move |store| {
                hash::hash_kv(&store.engine, revision, current, compacted).map_err(to_status)
            })
            .await?;
        Ok(HashKvResponse {
            header: self.store.identity.header(current),
            hash: hashed.hash,
            compact_revision: hashed.compact_revision,
            hash_revision: hashed.hash_revision,
        })
    }

    pub(super) async fn transfer_leadership(
        &self,
        request: Request<MoveLeaderRequest>,
    ) -> Result<MoveLeaderResponse, Status> {
        self.store.who(&request).await?.need(Need::Admin)?;
        let target = request.get_ref().target_id;
        // etcd waits for the transfer as long as the client's deadline lets it (answering
        // before the client gives up); a request with none gets the request timeout.
        let within = request_deadline(&request).map_or(self.store.route.timeout(), |d| d.mul_f64(0.9));
        self.cluster.mover.move_to(target, within).await.map_err(to_status)?;
        Ok(MoveLeaderResponse { header: self.store.header() })
    }

    pub(super) async fn downgrade_refused(
        &self,
        _: Request<DowngradeRequest>,
    ) -> Result<DowngradeResponse, Status> {
        Err(Unsupported::Downgrade.status())
    }

    pub(super) async fn snapshot_chunks(
        &self,
        request: Request<SnapshotRequest>,
    ) -> Result<BoxStream<SnapshotResponse>, Status> {
        self.admin_raw(&request).await?;
        let header = self.store.header();
        let engine = self.store.engine.clone();
        let (tx, rx) = mpsc::channel(SNAPSHOT_QUEUE);
        tokio::task::spawn_blocking(move || send_snapshot(&engine, header, tx));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }

    pub(super) async fn add(&self, request: Request<MemberAddRequest>) -> Result<MemberAddResponse, Status> {
        // etcd parses the URLs first, then checks the caller.
        let urls = peer_urls(&request.get_ref().peer_ur_ls)?;
        self.store.who(&request).await?.need(Need::Admin)?;
        let learner = request.get_ref().is_learner;
        let id = self.cluster.reconfigurer.add(urls.clone(), learner).await.map_err(to_status)?;
        let member = Member {
            id,
            name: String::new(),
            peer_ur_ls: urls,
            client_ur_ls: Vec::new(),
            is_learner: learner,
        };
        Ok(MemberAddResponse { header: self.store.header(), member: Some(member), members: self.members() })
    }

    pub(super) async fn remove(
        &self,
        request: Request<MemberRemoveRequest>,
    ) -> Result<MemberRemoveResponse, Status> {
        let (header, members) = self.change(&request, Change::Remove { id: request.get_ref().id }).await?;
        Ok(MemberRemoveResponse { header, members })
    }

    /// Keeps the learner flag, where etcd 3.4 clears it (its bug 21694, fixed in 3.5 and 3.6).
    pub(super) async fn update(
        &self,
        request: Request<MemberUpdateRequest>,
    ) -> Result<MemberUpdateResponse, Status> {
        let urls = peer_urls(&request.get_ref().peer_ur_ls)?;
        let change = Change::Update { id: request.get_ref().id, peer_urls: urls };
        let (header, members) = self.change(&request, change).await?;
        Ok(MemberUpdateResponse { header, members })
    }

    pub(super) async fn promote(
        &self,
        request: Request<MemberPromoteRequest>,
    ) -> Result<MemberPromoteResponse, Status> {
        let (header, members) = self.change(&request, Change::Promote { id: request.get_ref().id }).await?;
        Ok(MemberPromoteResponse { header, members })
    }

    /// A linearizable list (etcd 3.5's flag) waits for the read barrier first, so that it
    /// shows every membership change acknowledged before it.
    pub(super) async fn list(
        &self,
        request: Request<MemberListRequest>,
    ) -> Result<MemberListResponse, Status> {
        // etcd's fix of GHSA-q8m4-xhhv-38mg: the members only to a user.
        self.store.who(&request).await?.need(Need::User)?;
        if request.get_ref().linearizable {
            self.store.linearize().await?;
        }
        Ok(MemberListResponse { header: self.store.header(), members: self.members() })
    }

    /// `change` made for a sender with the root role; the header and the members after it.
    async fn change<T>(
        &self,
        request: &Request<T>,
        change: Change,
    ) -> Result<(Option<ResponseHeader>, Vec<Member>), Status> {
        self.store.who(request).await?.need(Need::Admin)?;
        self.cluster.reconfigurer.change(change).await.map_err(to_status)?;
        Ok((self.store.header(), self.members()))
    }

    /// The root role, refused as etcd refuses it here: the auth store's error passed through
    /// raw (codes.Unknown, `auth: ...`).
    async fn admin_raw<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.store.who(request).await?.check(Need::Admin).map_err(raw_auth_status)
    }
}
