//! The client half of the peer transport: one lazily connected gRPC channel per member, over
//! which the leader replicates (openraft's `RaftNetwork`, on one long-lived stream per peer:
//! [`super::raft_stream`]) and a follower forwards writes, read index requests and its own
//! record ([`LeaderLink`]).
//!
//! A message's body is postcard bytes of openraft's request or answer; every frame names this
//! member's cluster, so a member of another cluster refuses it. An error the remote Raft
//! answered travels in the body and comes back as openraft's `RemoteError`; a peer that cannot
//! be reached is `Unreachable` (openraft backs off before retrying), any other transport
//! failure a `NetworkError` (retried at once).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use openraft::error::{Fatal, NetworkError, RPCError, RaftError, RemoteError, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::SnapshotResponse;
use openraft::{Snapshot, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::reconfig::{Change, Members};
use crate::removed::{Removed, REMOVED_TEXT};
use crate::route::{Forwarded, LeaderLink, LinkError};
use crate::types::{decode, encode, MemberNode, Proposal, TypeConfig};
use actcd_proto::actcdpeerpb::peer_client::PeerClient;
use actcd_proto::actcdpeerpb::Frame;
use actcd_store::mvcc::hash::KvHash;
use actcd_store::StoreError;

use super::raft_stream::{OnStream, RaftStream};
use super::tls_connector::TlsConnector;
use super::{raft_network, snapshot_stream};

/// The largest peer message either side takes: an append of `MAX_PAYLOAD_ENTRIES` entries of
/// full batches stays below it (see [`crate::cluster::start::MAX_PAYLOAD_ENTRIES`]).
pub const MAX_PEER_MESSAGE: usize = 1 << 30;

/// HTTP/2 flow-control window of peer streams and connections, both ways: an append of a
/// full batch (megabytes) goes out in one round trip instead of waiting for window updates
/// every 64 KiB (HTTP/2's default).
pub const PEER_WINDOW: u32 = 16 << 20;

/// How long a peer may take to answer a probe (see [`crate::cluster::peer_probe`]).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long connecting to a peer may take before the call counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A follower that takes no 1 MiB piece of a snapshot for this long is given up on (see
/// [`snapshot_stream::bounded`]); openraft backs off and sends it again.
const SNAPSHOT_IDLE: Duration = Duration::from_secs(10);

/// How long a follower that received a whole snapshot may take to install it and answer.
const SNAPSHOT_INSTALL: Duration = Duration::from_secs(300);

/// A peer's URL, the channel dialed to it, and the Raft stream on that channel.
struct Dialed {
    url: String,
    channel: Channel,
    raft: RaftStream,
}

/// This member's connections to the others, shared by openraft's replication and the
/// forwarding of client calls.
#[derive(Clone)]
pub struct Peers {
    cluster_id: u64,
    me: u64,
    channels: Arc<Mutex<HashMap<u64, Dialed>>>,
    /// How to dial an https peer URL (`--peer-*` flags), if any is.
    tls: Option<TlsConnector>,
    /// Since when each peer has answered this member's Raft messages without a break (etcd's
    /// ActiveSince), for the membership checks; a peer that failed a call is absent.
    active: Arc<Mutex<HashMap<u64, Instant>>>,
    /// Where this member learns it was removed, when a peer refuses it so.
    removed: Removed,
}

impl Peers {
    /// The peers of member `me` of cluster `cluster_id`, dialed through `tls` where their
    /// URL is https.
    pub fn new(cluster_id: u64, me: u64, tls: Option<TlsConnector>, removed: Removed) -> Self {
        Self { cluster_id, me, channels: Arc::default(), tls, active: Arc::default(), removed }
    }

    /// Since when each peer has answered without a break.
    pub fn active_since(&self) -> BTreeMap<u64, Instant> {
        self.active.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(id, t)| (*id, *t)).collect()
    }

    /// Notes whether peer `id` answered a call, and whether its answer says this member was
    /// removed; a change is logged once, as etcd's peer status logs it.
    fn note(&self, id: u64, status: Option<&tonic::Status>) {
        if status.is_some_and(is_removal) {
            self.removed.mark(self.me);
        }
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let peer = format!("{id:x}");
        match status {
            None if !active.contains_key(&id) => {
                active.insert(id, Instant::now());
                tracing::info!(%peer, "peer became active");
            }
            Some(status) if active.remove(&id).is_some() => {
                tracing::warn!(%peer, %status, "peer became inactive (message send to peer failed)");
            }
            _ => {}
        }
    }

    /// A channel to `url`, dialed lazily with the peer TLS where the URL is https.
    fn dial(&self, url: &str) -> Result<Channel, NetworkError> {
        let endpoint = |dialed: String| {
            Endpoint::from_shared(dialed).map_err(|e| network_error(format!("bad peer URL {url}: {e}"))).map(
                |e| {
                    e.connect_timeout(CONNECT_TIMEOUT)
                        .initial_stream_window_size(PEER_WINDOW)
                        .initial_connection_window_size(PEER_WINDOW)
                        .tcp_nodelay(true)
                },
            )
        };
        let channel = match (url.strip_prefix("https://"), &self.tls) {
            (None, _) => endpoint(url.to_string())?.connect_lazy(),
            // tonic is given the URL as http: the connector adds the TLS.
            (Some(rest), Some(tls)) => {
                endpoint(format!("http://{rest}"))?.connect_with_connector_lazy(tls.clone())
            }
            (Some(_), None) => {
                return Err(network_error(format!(
                    "https peer URL {url}, and no --peer-cert-file or --peer-auto-tls to dial it with"
                )))
            }
        };
        Ok(channel)
    }

    /// The client of member `id` at its first peer URL, its channel made once per URL (tonic
    /// reconnects it); a member whose URL changed gets a new one.
    fn client(&self, id: u64, node: &MemberNode) -> Result<PeerClient<Channel>, NetworkError> {
        Ok(self.dialed(id, node)?.0)
    }

    /// [`Peers::client`], and the Raft stream to member `id`.
    fn dialed(&self, id: u64, node: &MemberNode) -> Result<(PeerClient<Channel>, RaftStream), NetworkError> {
        let url = node
            .peer_urls
            .first()
            .ok_or_else(|| network_error(format!("member {id:x} has no peer URL")))?
            .clone();
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let dialed = match channels.get(&id) {
            Some(dialed) if dialed.url == url => dialed,
            _ => {
                let channel = self.dial(&url).map_err(|e| network_error(format!("member {id:x}: {e}")))?;
                channels.insert(id, Dialed { url, channel, raft: RaftStream::default() });
                &channels[&id]
            }
        };
        Ok((wrap(dialed.channel.clone()), dialed.raft.clone()))
    }

    /// Forgets the channels of members no longer in `members`: peer connections go with the
    /// members.
    pub fn retain(&self, members: &std::collections::BTreeSet<u64>) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.retain(|id, _| members.contains(id));
        self.active.lock().unwrap_or_else(|p| p.into_inner()).retain(|id, _| members.contains(id));
    }

    fn frame<T: Serialize>(&self, body: &T) -> Result<Frame, NetworkError> {
        let body = encode(body).map_err(|e| network_error(format!("cannot encode a peer message: {e}")))?;
        Ok(Frame { cluster_id: self.cluster_id, from: self.me, body: body.into(), seq: 0 })
    }

    /// A record for this member's own messages to `target`.
    fn link(&self, target: u64, node: &MemberNode) -> PeerLink {
        PeerLink { peers: self.clone(), target, node: node.clone() }
    }

    /// One call to the leader with `frame`, counted as peer traffic, its answer's body being
    /// `Result<T, StoreError>`. A call the leader never got is [`LinkError::NotSent`]; one cut
    /// off after it was sent fails with `lost` (the caller knows whether it may have taken
    /// effect).
    async fn to_leader<T: DeserializeOwned>(
        &self,
        leader: &(u64, MemberNode),
        frame: Result<Frame, NetworkError>,
        lost: StoreError,
        call: impl AsyncFnOnce(PeerClient<Channel>, Frame) -> Result<tonic::Response<Frame>, tonic::Status>,
    ) -> Result<T, LinkError> {
        let failed = |e| LinkError::Failed(store_error(e));
        let frame = frame.map_err(failed)?;
        let client = self.client(leader.0, &leader.1).map_err(failed)?;
        let sent = frame.body.len();
        let answer = call(client, frame).await.map_err(|status| {
            tracing::debug!(%status, "a call to the leader failed");
            if is_removal(&status) {
                self.removed.mark(self.me);
            }
            if never_sent(&status) {
                LinkError::NotSent
            } else {
                LinkError::Failed(lost)
            }
        })?;
        traffic(leader.0, sent, answer.get_ref().body.len());
        body::<Result<T, StoreError>>(&answer.into_inner()).map_err(failed)?.map_err(LinkError::Failed)
    }

    /// [`Peers::to_leader`] for the calls that a member does not retry itself: not sent means
    /// no leader to take it.
    async fn ask<Req: Serialize, T: DeserializeOwned>(
        &self,
        leader: (u64, MemberNode),
        request: &Req,
        call: impl AsyncFnOnce(PeerClient<Channel>, Frame) -> Result<tonic::Response<Frame>, tonic::Status>,
    ) -> Result<T, StoreError> {
        let answer = self.to_leader(&leader, self.frame(request), StoreError::Timeout, call).await;
        answer.map_err(LinkError::into_store_error)
    }

    /// Renews lease `id` on the leader.
    pub async fn lease_renew(&self, leader: (u64, MemberNode), id: i64) -> Result<i64, StoreError> {
        self.ask(leader, &id, async |mut c, f| c.lease_renew(f).await).await
    }

    /// Lease `id`'s remaining and granted TTL on the leader.
    pub async fn lease_remaining(
        &self,
        leader: (u64, MemberNode),
        id: i64,
    ) -> Result<Option<(i64, i64)>, StoreError> {
        self.ask(leader, &id, async |mut c, f| c.lease_remaining(f).await).await
    }

    /// Has the leader check and make a membership change: the log index of its entry.
    pub async fn reconfigure(&self, leader: (u64, MemberNode), change: &Change) -> Result<u64, StoreError> {
        self.ask(leader, change, async |mut c, f| c.reconfigure(f).await).await
    }

    /// Asks the peer at `url` for the cluster's id and membership; `as_id` names the asking
    /// member (0 for one that does not know its id yet, whose [`Peers`] name cluster 0 too).
    pub async fn members_at(&self, url: &str, as_id: u64) -> Result<(u64, Members), StoreError> {
        let channel = self.dial(url).map_err(store_error)?;
        let frame = Frame {
            cluster_id: self.cluster_id,
            from: as_id,
            body: encode(&()).map_err(|e| StoreError::Stopped(e.to_string()))?.into(),
            seq: 0,
        };
        let answer = wrap(channel).members(frame).await.map_err(|status| {
            if is_removal(&status) {
                self.removed.mark(self.me);
            }
            StoreError::Stopped(format!("peer {url}: {}", status.message()))
        })?;
        let frame = answer.into_inner();
        let members = body::<Members>(&frame).map_err(store_error)?;
        Ok((frame.cluster_id, members))
    }

    /// Asks member `target` for the membership over its usual channel, noting whether it
    /// answered (see [`crate::cluster::peer_probe`]); `None` when it did not.
    pub async fn probe(&self, target: (u64, MemberNode)) -> Option<Members> {
        let mut client = self.client(target.0, &target.1).ok()?;
        let frame = self.frame(&()).ok()?;
        let mut request = tonic::Request::new(frame);
        request.set_timeout(PROBE_TIMEOUT);
        match client.members(request).await {
            Ok(answer) => {
                self.note(target.0, None);
                body::<Members>(answer.get_ref()).ok()
            }
            Err(status) => {
                self.note(target.0, Some(&status));
                None
            }
        }
    }

    /// Member `target`'s HashKV at `revision`.
    pub async fn hash_kv(&self, target: (u64, MemberNode), revision: i64) -> Result<KvHash, StoreError> {
        self.ask(target, &revision, async |mut c, f| c.hash_kv(f).await).await
    }

    /// Asks member `target` to campaign at once (MoveLeader's last step).
    pub async fn timeout_now(&self, target: (u64, MemberNode)) -> Result<(), StoreError> {
        self.ask(target, &(), async |mut c, f| c.timeout_now(f).await).await
    }
}

fn wrap(channel: Channel) -> PeerClient<Channel> {
    PeerClient::new(channel)
        .max_decoding_message_size(MAX_PEER_MESSAGE)
        .max_encoding_message_size(MAX_PEER_MESSAGE)
}

/// Whether a peer's refusal says this member was removed from the cluster.
fn is_removal(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::FailedPrecondition && status.message() == REMOVED_TEXT
}

/// Counts one call to peer `to`: the bytes of its request and answer, as etcd's peer series.
fn traffic(to: u64, sent: usize, received: usize) {
    use actcd_store::metric_names::{
        ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL, ETCD_NETWORK_PEER_SENT_BYTES_TOTAL,
    };
    let peer = format!("{to:x}");
    metrics::counter!(ETCD_NETWORK_PEER_SENT_BYTES_TOTAL, "To" => peer.clone()).increment(sent as u64);
    metrics::counter!(ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL, "From" => peer).increment(received as u64);
}

fn network_error(text: String) -> NetworkError {
    NetworkError::new(&std::io::Error::other(text))
}

fn store_error(err: NetworkError) -> StoreError {
    StoreError::Stopped(err.to_string())
}

/// Whether a failed call never reached the peer: its connection was refused or never made.
fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::TimedOut) {
                return true;
            }
            // A refused TLS handshake: nothing was sent over it.
            if io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
                return true;
            }
        }
        // hyper's connector names its failures so; the request was not written.
        if err.to_string().starts_with("tcp connect error") {
            return true;
        }
        source = err.source();
    }
    false
}

fn body<T: DeserializeOwned>(frame: &Frame) -> Result<T, NetworkError> {
    decode(&frame.body).map_err(|e| network_error(format!("cannot decode a peer answer: {e}")))
}

/// A transport failure, as openraft wants to hear it: a peer that is down is unreachable.
fn call_failed(status: &tonic::Status) -> RPCError<u64, MemberNode, RaftError<u64>> {
    match status.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            RPCError::Unreachable(Unreachable::new(status))
        }
        _ => RPCError::Network(NetworkError::new(status)),
    }
}

impl RaftNetworkFactory<TypeConfig> for Peers {
    type Network = PeerLink;

    async fn new_client(&mut self, target: u64, node: &MemberNode) -> PeerLink {
        self.link(target, node)
    }
}

/// The leader's connection to one follower.
pub struct PeerLink {
    peers: Peers,
    target: u64,
    node: MemberNode,
}

impl PeerLink {
    fn note<T>(&self, result: &Result<T, tonic::Status>) {
        self.peers.note(self.target, result.as_ref().err());
    }

    /// One Raft call: on the peer's stream, or as a unary `call` to a peer without one.
    async fn unary<Req: OnStream, Resp: DeserializeOwned>(
        &mut self,
        request: &Req,
        option: &RPCOption,
        call: impl AsyncFnOnce(
            &mut PeerClient<Channel>,
            tonic::Request<Frame>,
        ) -> Result<tonic::Response<Frame>, tonic::Status>,
    ) -> Result<Resp, RPCError<u64, MemberNode, RaftError<u64>>> {
        let (mut client, stream) = self.peers.dialed(self.target, &self.node).map_err(RPCError::Network)?;
        let frame = self.peers.frame(&request.on_stream()).map_err(RPCError::Network)?;
        let sent = frame.body.len();
        let started = std::time::Instant::now();
        let answer = match stream.call(&client, frame, option.hard_ttl()).await {
            Some(answer) if answer.as_ref().err().is_none_or(|s| s.code() != tonic::Code::Unimplemented) => {
                answer
            }
            _ => {
                let mut request = tonic::Request::new(self.peers.frame(request).map_err(RPCError::Network)?);
                request.set_timeout(option.hard_ttl());
                call(&mut client, request).await.map(tonic::Response::into_inner)
            }
        };
        self.note(&answer);
        let answer = answer.map_err(|s| call_failed(&s))?;
        traffic(self.target, sent, answer.body.len());
        metrics::histogram!(actcd_store::metric_names::ETCD_NETWORK_PEER_ROUND_TRIP_TIME_SECONDS, "To" => format!("{:x}", self.target))
            .record(started.elapsed().as_secs_f64());
        let answer: Result<Resp, RaftError<u64>> = body(&answer).map_err(RPCError::Network)?;
        answer
            .map_err(|e| RPCError::RemoteError(RemoteError::new_with_node(self.target, self.node.clone(), e)))
    }

    /// Streams the snapshot's checkpoint to the target, which installs it; `Err` where the
    /// stream failed or stalled.
    async fn send_snapshot(
        &mut self,
        vote: Vote<u64>,
        snapshot: Snapshot<TypeConfig>,
    ) -> Result<Result<SnapshotResponse<u64>, Fatal<u64>>, StreamingError<TypeConfig, Fatal<u64>>> {
        let mut client = self.peers.client(self.target, &self.node)?;
        let header = encode(&(vote, snapshot.meta.clone()))
            .map_err(|e| network_error(format!("cannot encode a snapshot header: {e}")))?;
        let progress = Arc::new(snapshot_stream::SendProgress::default());
        let chunks = snapshot_stream::counted(
            snapshot_stream::send(self.peers.cluster_id, self.peers.me, header, *snapshot.snapshot),
            Arc::clone(&progress),
        );
        let sending =
            snapshot_stream::bounded(client.snapshot(chunks), &progress, SNAPSHOT_IDLE, SNAPSHOT_INSTALL);
        let answer = sending.await.map_err(|stalled| {
            tracing::warn!(member = %format!("{:x}", self.target), %stalled, "snapshot send given up; it is sent again later");
            // As a peer that cannot be reached: openraft backs off before it tries again.
            StreamingError::Unreachable(Unreachable::new(&stalled))
        })?;
        let answer = answer.map_err(|status| match call_failed(&status) {
            RPCError::Unreachable(u) => StreamingError::Unreachable(u),
            _ => StreamingError::Network(NetworkError::new(&status)),
        })?;
        Ok(body(&answer.into_inner())?)
    }
}

raft_network!(PeerLink);

impl LeaderLink for Peers {
    fn propose(
        &self,
        leader: (u64, MemberNode),
        proposal: &Proposal,
    ) -> BoxFuture<'static, Result<Forwarded, LinkError>> {
        let peers = self.clone();
        // Encoded now: the caller may send the same proposal again.
        let frame = self.frame(proposal);
        Box::pin(async move {
            // The leader may have taken it before it went away.
            let lost = StoreError::TimeoutDueToLeaderFail;
            peers.to_leader(&leader, frame, lost, async |mut c, f| c.propose(f).await).await
        })
    }

    fn read_index(&self, leader: (u64, MemberNode)) -> BoxFuture<'static, Result<u64, LinkError>> {
        let peers = self.clone();
        Box::pin(async move {
            // A read changes nothing: a lost answer is only a timeout.
            let frame = peers.frame(&());
            peers.to_leader(&leader, frame, StoreError::Timeout, async |mut c, f| c.read_index(f).await).await
        })
    }
}
