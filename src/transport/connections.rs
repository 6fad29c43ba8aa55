//! Seeing each client connection's birth and death under tonic: the server accepts from our own
//! listener stream, whose sockets (plain, or through their TLS handshake) carry a connection id
//! and the connection's Range slots (tonic's `Connected` puts them in every request's
//! extensions) and tell the registry when they are dropped, that is, when the connection is
//! gone. What they read reaches h2 through [`AuthorityFix`].

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use actix::Addr;
use bytes::BytesMut;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use actcd_actors::conn::actor::ConnActor;
use actcd_actors::conn::messages::ConnectionClosed;

use crate::transport::authority_fix::AuthorityFix;
use crate::transport::cert_names::common_name;
use crate::transport::connection_budget::{accept, handshakes, Admitted, ConnectionBudget};
use crate::transport::range_backpressure::RangeSlots;
use crate::transport::tls::TlsServer;
use crate::transport::write_coalescing::Coalescing;

/// A connection's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u64);

/// What each request of a connection finds in its extensions.
#[derive(Clone)]
pub struct ConnInfo {
    /// The connection's id.
    pub id: ConnId,
    /// The connection's share of undelivered Range answers.
    pub range_slots: RangeSlots,
    /// The Common Name of the client certificate the TLS handshake verified (with
    /// `--client-cert-auth`): with auth enabled it is the user of a request without a token,
    /// as on etcd.
    pub common_name: Option<Arc<str>>,
}

impl ConnInfo {
    /// The Range slots of the connection `extensions` came with: the function that
    /// [`RangeBackpressureLayer::new`](super::range_backpressure::RangeBackpressureLayer::new)
    /// is given.
    pub fn range_slots_of(extensions: &http::Extensions) -> Option<&RangeSlots> {
        extensions.get::<ConnInfo>().map(|conn| &conn.range_slots)
    }
}

/// Live connections that have a ConnActor (those that opened a stream). Touched by the accept
/// path, the gRPC services and socket drops on many threads, hence the mutex; each access is a
/// map lookup, never held across an await.
#[derive(Default)]
pub struct Connections {
    actors: Mutex<HashMap<ConnId, Addr<ConnActor>>>,
    next_id: AtomicU64,
}

impl Connections {
    /// The connection's actor, started by `start` if it has none yet.
    pub fn actor(&self, id: ConnId, start: impl FnOnce() -> Addr<ConnActor>) -> Option<Addr<ConnActor>> {
        let mut actors = self.actors.lock().ok()?;
        Some(actors.entry(id).or_insert_with(start).clone())
    }

    fn closed(&self, id: ConnId) {
        let actor = self.actors.lock().ok().and_then(|mut a| a.remove(&id));
        if let Some(actor) = actor {
            // One message per closed connection, and its streams must be stopped: do_send.
            actor.do_send(ConnectionClosed);
        }
    }

    /// Connections with an actor.
    pub fn len(&self) -> usize {
        self.actors.lock().map(|a| a.len()).unwrap_or(0)
    }

    /// True when no connection has an actor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An accepted socket (plain, or TLS over it) that reports its own end, hands what it reads
/// to h2 through [`AuthorityFix`], and coalesces what h2 writes ([`Coalescing`]).
pub struct TrackedStream<S = Admitted> {
    inner: Coalescing<S>,
    info: ConnInfo,
    registry: Arc<Connections>,
    fix: AuthorityFix,
    /// Bytes the fix let through that the reader has not taken yet.
    ready: BytesMut,
}

/// How much one read from the socket takes at most.
const READ_CHUNK: usize = 16 * 1024;

impl<S> TrackedStream<S> {
    fn new(inner: S, registry: &Arc<Connections>, common_name: Option<Arc<str>>) -> Self {
        let id = ConnId(registry.next_id.fetch_add(1, Ordering::Relaxed));
        let info = ConnInfo { id, range_slots: RangeSlots::default(), common_name };
        Self {
            inner: Coalescing::new(inner),
            info,
            registry: Arc::clone(registry),
            fix: AuthorityFix::default(),
            ready: BytesMut::new(),
        }
    }
}

impl<S> Drop for TrackedStream<S> {
    fn drop(&mut self) {
        self.registry.closed(self.info.id);
    }
}

impl<S> Connected for TrackedStream<S> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TrackedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A read that only completes part of a frame the fix holds back reads on: returning
        // no bytes would tell h2 the connection ended.
        while this.ready.is_empty() {
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk[..buf.remaining().clamp(1, READ_CHUNK)]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            this.fix.feed(read.filled(), &mut this.ready);
        }
        let n = this.ready.len().min(buf.remaining());
        buf.put_slice(&this.ready.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TrackedStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Accepted sockets as a stream for tonic's `serve_with_incoming`. It never yields an error:
/// tonic retries a failed accept at once, which on EMFILE would spin; [`accept`] backs off.
pub fn incoming(
    listener: TcpListener,
    registry: Arc<Connections>,
    budget: Arc<ConnectionBudget>,
) -> impl Stream<Item = io::Result<TrackedStream>> {
    futures::stream::unfold((listener, registry, budget), |(listener, registry, budget)| async move {
        let (inner, _) = accept(&listener, &budget).await;
        // Small requests and responses must not wait for Nagle.
        let _ = inner.stream().set_nodelay(true);
        let tracked = TrackedStream::new(inner, &registry, None);
        Some((Ok(tracked), (listener, registry, budget)))
    })
}

/// Accepted sockets through their TLS handshake (see [`handshakes`]), as a stream for tonic.
pub fn incoming_tls(
    listener: TcpListener,
    registry: Arc<Connections>,
    budget: Arc<ConnectionBudget>,
    tls: TlsServer,
) -> impl Stream<Item = io::Result<TrackedStream<TlsStream<Admitted>>>> {
    let cn_is_user = tls.cn_is_user();
    ReceiverStream::new(handshakes(listener, budget, tls)).map(move |(stream, _)| {
        let common_name = cn_is_user
            .then(|| stream.get_ref().1.peer_certificates().and_then(|chain| common_name(chain.first()?)))
            .flatten();
        Ok(TrackedStream::new(stream, &registry, common_name))
    })
}
