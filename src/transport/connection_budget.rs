//! Client sockets within the process's file-descriptor limit. Every accepted socket (gRPC or
//! metrics) takes a permit; past the budget a new connection is accepted and closed at once, so
//! the client gets a prompt error, and the descriptors kept back stay free for storage: a RocksDB
//! flush or WAL switch that could not open its file would fail a commit and stop the server.
//! Accept errors (EMFILE when something else took the descriptors) back off instead of retrying
//! in a busy loop.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

use crate::transport::remote_san::{self, AltNames};
use crate::transport::tls::TlsServer;

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
        Some(Permit(Arc::clone(self)))
    }
}

/// One admitted socket's share of the budget, given back when dropped.
pub struct Permit(Arc<ConnectionBudget>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!(actcd_store::metric_names::ACTCD_CLIENT_CONNECTIONS).decrement(1.0);
    }
}

/// Accepts the next connection within the budget. Connections over it are closed as soon as
/// they are accepted. Never fails: errors that concern one connection are skipped, others
/// (EMFILE, ENFILE, ENOBUFS) are logged and retried after a growing pause.
pub async fn accept(listener: &TcpListener, budget: &Arc<ConnectionBudget>) -> (Admitted, SocketAddr) {
    let mut backoff = MIN_ACCEPT_BACKOFF;
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                backoff = MIN_ACCEPT_BACKOFF;
                match budget.try_admit() {
                    Some(permit) => return (Admitted { stream, _permit: permit }, addr),
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

/// An accepted socket holding its permit.
pub struct Admitted {
    stream: TcpStream,
    _permit: Permit,
}

impl Admitted {
    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

impl AsyncRead for Admitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A listener for axum (the metrics URLs) whose connections count against the budget.
pub struct BudgetedListener {
    /// The bound listener.
    pub listener: TcpListener,
    /// The budget shared with the gRPC listeners.
    pub budget: Arc<ConnectionBudget>,
}

impl axum::serve::Listener for BudgetedListener {
    type Io = Admitted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Admitted, SocketAddr) {
        accept(&self.listener, &self.budget).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// TLS handshakes under way at once on one listener. Past it, the accept loop waits for one to
/// end: the sockets it has not taken wait in the kernel's backlog.
const HANDSHAKES_IN_FLIGHT: usize = 256;
/// Connections through their handshake that the server has not taken yet. When it is full the
/// handshake tasks wait, holding their permits, so the accept loop stops too.
const HANDSHAKES_DONE: usize = 64;
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts within the budget and runs each TLS handshake in a task of its own, so that a slow
/// or silent client never holds up the others; a failed one is dropped and logged with etcd's
/// words ("rejected connection", the remote address and the reason): at warn on a peer
/// listener, where the client certificate's SANs must also name the remote address
/// ([`remote_san`]), at debug on the client and metrics ports, where a scan or a flood of
/// plaintext clients would otherwise fill the log (etcd warns there too). Ends when the
/// receiver is dropped.
pub fn handshakes(
    listener: TcpListener,
    budget: Arc<ConnectionBudget>,
    tls: TlsServer,
) -> mpsc::Receiver<(TlsStream<Admitted>, SocketAddr)> {
    let (done, handed) = mpsc::channel(HANDSHAKES_DONE);
    let permits = Arc::new(Semaphore::new(HANDSHAKES_IN_FLIGHT));
    tokio::spawn(async move {
        while !done.is_closed() {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { break };
            let (inner, peer) = accept(&listener, &budget).await;
            let _ = inner.stream().set_nodelay(true);
            let (acceptor, done) = (tls.acceptor(), done.clone());
            let peers = tls.is_peer();
            tokio::spawn(async move {
                let _permit = permit;
                let handshake = handshake(acceptor, inner, peer, peers);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Some(stream)) => {
                        let _ = done.send((stream, peer)).await;
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
    inner: Admitted,
    peer: SocketAddr,
    peers: bool,
) -> Option<TlsStream<Admitted>> {
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

/// A listener for axum (https metrics URLs): connections through their TLS handshake.
pub struct TlsBudgetedListener {
    handshaken: mpsc::Receiver<(TlsStream<Admitted>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsBudgetedListener {
    /// Serves `tls` on `listener` within `budget`.
    pub fn new(listener: TcpListener, budget: Arc<ConnectionBudget>, tls: TlsServer) -> io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(Self { handshaken: handshakes(listener, budget, tls), local })
    }
}

impl axum::serve::Listener for TlsBudgetedListener {
    type Io = TlsStream<Admitted>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TlsStream<Admitted>, SocketAddr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accept task ended (only with the runtime): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
