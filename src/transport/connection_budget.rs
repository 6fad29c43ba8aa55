//! Client sockets within the process's file-descriptor limit, and how many each serving thread
//! serves ([`Load`], by which the acceptor picks a thread). Every accepted socket (gRPC or
//! metrics) takes a permit; past the budget a new connection is accepted and closed at once, so
//! the client gets a prompt error, and the descriptors kept back stay free for storage: a RocksDB
//! flush or WAL switch that could not open its file would fail a commit and stop the server.
//! Accept errors (EMFILE when something else took the descriptors) back off instead of retrying
//! in a busy loop.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actcd_edge::tls::remote_san::{self, AltNames};
use actcd_edge::tls::TlsServer;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

/// Descriptors kept back beyond those open at start: RocksDB's new WAL, SST and MANIFEST files
/// as it flushes and compacts, snapshot checkpoints, the process's own odds and ends.
const STORAGE_HEADROOM_FDS: usize = 128;
/// First and longest wait after an accept error (grpc-go's, which etcd uses).
const MIN_ACCEPT_BACKOFF: Duration = Duration::from_millis(5);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// How many client sockets may be open at once, and how many are.
pub struct ConnectionBudget {
    limit: usize,
    open: AtomicUsize,
}

impl ConnectionBudget {
    /// Raises the soft descriptor limit to the hard one (as Go's runtime does for etcd), then
    /// allows client sockets up to it, minus the descriptors open now and a headroom for storage.
    pub fn for_this_process() -> Self {
        let descriptors = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(soft) => usize::try_from(soft).unwrap_or(usize::MAX),
            Err(err) => {
                tracing::warn!(%err, "cannot read the descriptor limit; assuming 1024");
                1024
            }
        };
        let open_now = std::fs::read_dir("/proc/self/fd").map_or(64, |dir| dir.count());
        let limit = descriptors.saturating_sub(open_now + STORAGE_HEADROOM_FDS).max(1);
        tracing::info!(limit, descriptors, open_now, "client connections allowed");
        metrics::gauge!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS_LIMIT).set(limit as f64);
        metrics::gauge!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS).set(0.0);
        metrics::counter!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS_REFUSED_TOTAL).absolute(0);
        Self { limit, open: AtomicUsize::new(0) }
    }

    /// The number of client sockets allowed at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn try_admit(self: &Arc<Self>) -> Option<Permit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1))
            .ok()?;
        metrics::gauge!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS).increment(1.0);
        Some(Permit { budget: Arc::clone(self), _thread: None })
    }
}

/// One admitted socket's share of the budget, and of its serving thread's connections once
/// it is handed to one; both given back when dropped.
pub struct Permit {
    budget: Arc<ConnectionBudget>,
    _thread: Option<ThreadShare>,
}

impl Permit {
    /// This permit, counted among the connections of a serving thread too.
    pub fn on_thread(mut self, share: ThreadShare) -> Self {
        self._thread = Some(share);
        self
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.open.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS).decrement(1.0);
    }
}

/// An accepted socket, its share of the budget, and its peer's address.
pub type Accepted = (TcpStream, Permit, SocketAddr);

/// `listener`'s accepted sockets within `budget`, as a stream that never ends (see [`accept`]).
pub fn accepted(listener: TcpListener, budget: Arc<ConnectionBudget>) -> BoxStream<'static, Accepted> {
    futures::stream::unfold((listener, budget), |(listener, budget)| async move {
        let socket = accept(&listener, &budget).await;
        Some((socket, (listener, budget)))
    })
    .boxed()
}

/// The connections each serving thread serves now.
pub struct Load(Box<[AtomicUsize]>);

impl Load {
    /// No connections on any of `threads` threads.
    pub fn new(threads: usize) -> Arc<Self> {
        Arc::new(Self((0..threads.max(1)).map(|_| AtomicUsize::new(0)).collect()))
    }

    /// The connections on each thread.
    pub fn counts(&self) -> Vec<usize> {
        self.0.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// The thread serving the fewest connections (the first of those), counted with the one
    /// it is handed.
    pub fn take_least(self: &Arc<Self>) -> ThreadShare {
        let index = (0..self.0.len()).min_by_key(|&i| self.0[i].load(Ordering::Relaxed)).unwrap_or(0);
        self.0[index].fetch_add(1, Ordering::Relaxed);
        ThreadShare { load: Arc::clone(self), index }
    }
}

/// One connection's place on its serving thread, given back when the connection ends.
pub struct ThreadShare {
    load: Arc<Load>,
    index: usize,
}

impl ThreadShare {
    /// The thread's index.
    pub fn thread(&self) -> usize {
        self.index
    }
}

impl Drop for ThreadShare {
    fn drop(&mut self) {
        self.load.0[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts the next connection within the budget. Connections over it are closed as soon as
/// they are accepted. Never fails: errors that concern one connection are skipped, others
/// (EMFILE, ENFILE, ENOBUFS) are logged and retried after a growing pause.
pub async fn accept(
    listener: &TcpListener,
    budget: &Arc<ConnectionBudget>,
) -> (TcpStream, Permit, SocketAddr) {
    let mut backoff = MIN_ACCEPT_BACKOFF;
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                backoff = MIN_ACCEPT_BACKOFF;
                match budget.try_admit() {
                    Some(permit) => return (stream, permit, addr),
                    None => {
                        metrics::counter!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS_REFUSED_TOTAL)
                            .increment(1);
                        tracing::debug!(%addr, limit = budget.limit, "connection refused: at the connection limit");
                    }
                }
            }
            Err(err) if concerns_one_connection(&err) => {}
            Err(err) => {
                tracing::warn!(%err, retry_in = ?backoff, "cannot accept connections");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
            }
        }
    }
}

fn concerns_one_connection(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// TLS handshakes under way at once on one listener. Past it, the accept loop waits for one to
/// end: the sockets it has not taken wait in the kernel's backlog.
const HANDSHAKES_IN_FLIGHT: usize = 256;
/// Connections through their handshake that the server has not taken yet. When it is full the
/// handshake tasks wait, holding their permits, so the accept loop stops too.
const HANDSHAKES_DONE: usize = 64;
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the TLS handshake of each of `sockets` (accepted within the budget) in a task of its
/// own, so that a slow or silent client never holds up the others; a failed one is dropped and logged with etcd's
/// words ("rejected connection", the remote address and the reason): at warn on a peer
/// listener, where the client certificate's SANs must also name the remote address
/// ([`remote_san`]), at debug on the client and metrics ports, where a scan or a flood of
/// plaintext clients would otherwise fill the log (etcd warns there too). Ends when the
/// receiver is dropped.
pub fn handshakes(
    mut sockets: BoxStream<'static, Accepted>,
    tls: TlsServer,
) -> mpsc::Receiver<(TlsStream<TcpStream>, Permit)> {
    let (done, handed) = mpsc::channel(HANDSHAKES_DONE);
    let permits = Arc::new(Semaphore::new(HANDSHAKES_IN_FLIGHT));
    tokio::spawn(async move {
        while !done.is_closed() {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { break };
            let Some((inner, admitted, peer)) = sockets.next().await else { break };
            let _ = inner.set_nodelay(true);
            let (acceptor, done) = (tls.acceptor(), done.clone());
            let peers = tls.is_peer();
            tokio::spawn(async move {
                let _permit = permit;
                let handshake = handshake(acceptor, inner, peer, peers);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Some(stream)) => {
                        let _ = done.send((stream, admitted)).await;
                    }
                    Ok(None) => {}
                    Err(_) => rejected(peers, peer, "TLS handshake timed out"),
                }
            });
        }
    });
    handed
}

/// Logs a refused connection from `remote` (see [`handshakes`] for the level).
fn rejected(peers: bool, remote: SocketAddr, error: &str) {
    if peers {
        tracing::warn!(remote_addr = %remote, error, "rejected connection");
    } else {
        tracing::debug!(remote_addr = %remote, error, "rejected connection");
    }
}

/// One client's TLS handshake, then (on a peer listener) its certificate's SANs against its
/// address; a refusal is logged here and ends in `None`.
async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    inner: TcpStream,
    peer: SocketAddr,
    peers: bool,
) -> Option<TlsStream<TcpStream>> {
    let stream = match acceptor.accept(inner).await {
        Ok(stream) => stream,
        Err(err) => {
            rejected(peers, peer, &err.to_string());
            return None;
        }
    };
    let cert = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first());
    if let Some(cert) = cert.filter(|_| peers) {
        let names = AltNames::of(cert);
        if let Err(why) = names.admit(peer.ip(), remote_san::resolve).await {
            let (ips, dns) = (&names.ips, &names.dns);
            tracing::warn!(remote_addr = %peer, ip_addresses = ?ips, dns_names = ?dns, error = %why, "rejected connection");
            return None;
        }
    }
    Some(stream)
}
