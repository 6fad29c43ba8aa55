//! Seeing each client connection's birth and death under tonic: the server accepts from our own
//! listener stream, whose sockets ([`ClientSocket`]: plain, or through their TLS handshake) carry
//! a connection id and the connection's Range slots and tell the registry here when they are
//! dropped, that is, when the connection is gone.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use actix::Addr;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::either::Either;

use actcd_actors::conn::actor::ConnActor;
use actcd_actors::conn::messages::ConnectionClosed;

use crate::transport::cert_names::common_name;
use crate::transport::client_socket::ClientSocket;
use crate::transport::connection_budget::{accept, handshakes, ConnectionBudget};
use crate::transport::range_backpressure::RangeSlots;
use crate::transport::tls::TlsServer;

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
    /// [`RangeBackpressure::new`](super::range_backpressure::RangeBackpressure::new)
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
    pub(super) next_id: AtomicU64,
}

impl Connections {
    /// The connection's actor, started by `start` if it has none yet.
    pub fn actor(&self, id: ConnId, start: impl FnOnce() -> Addr<ConnActor>) -> Option<Addr<ConnActor>> {
        let mut actors = self.actors.lock().ok()?;
        Some(actors.entry(id).or_insert_with(start).clone())
    }

    pub(super) fn closed(&self, id: ConnId) {
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

/// Accepted sockets within the budget (through their TLS handshake on an https URL, see
/// [`handshakes`]), registered in `registry`, as a stream for tonic's `serve_with_incoming`. It
/// never yields an error: tonic retries a failed accept at once, which on EMFILE would spin;
/// [`accept`] backs off.
pub fn incoming(
    listener: TcpListener,
    registry: Arc<Connections>,
    budget: Arc<ConnectionBudget>,
    tls: Option<TlsServer>,
) -> BoxStream<'static, io::Result<ClientSocket>> {
    let Some(tls) = tls else {
        return futures::stream::unfold(
            (listener, registry, budget),
            |(listener, registry, budget)| async move {
                let (wire, permit, _) = accept(&listener, &budget).await;
                // Small requests and responses must not wait for Nagle.
                let _ = wire.set_nodelay(true);
                let socket = ClientSocket::new(Either::Left(wire), Some(permit), &registry, None);
                Some((Ok(socket), (listener, registry, budget)))
            },
        )
        .boxed();
    };
    let cn_is_user = tls.cn_is_user();
    ReceiverStream::new(handshakes(listener, budget, tls))
        .map(move |(stream, permit)| {
            let common_name = cn_is_user
                .then(|| stream.get_ref().1.peer_certificates().and_then(|chain| common_name(chain.first()?)))
                .flatten();
            Ok(ClientSocket::new(Either::Right(Box::new(stream)), Some(permit), &registry, common_name))
        })
        .boxed()
}

/// A listener for axum (the metrics URLs): [`incoming`]'s sockets.
pub struct SocketListener {
    sockets: BoxStream<'static, io::Result<ClientSocket>>,
    local: SocketAddr,
}

impl SocketListener {
    /// Serves `listener` within `budget`, with `tls` on an https URL. Its connections have
    /// no streams, so a registry of their own that never holds an actor.
    pub fn new(
        listener: TcpListener,
        budget: Arc<ConnectionBudget>,
        tls: Option<TlsServer>,
    ) -> io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(Self { sockets: incoming(listener, Arc::default(), budget, tls), local })
    }
}

impl axum::serve::Listener for SocketListener {
    type Io = ClientSocket;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ClientSocket, SocketAddr) {
        match self.sockets.next().await {
            Some(Ok(socket)) => (socket, self.local),
            // The accept task ended (only with the runtime): nothing more will come.
            _ => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
