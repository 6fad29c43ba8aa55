//! The client and metrics URLs' accepted sockets as a stream: within the descriptor budget,
//! through their TLS handshake on an https URL, each a [`ClientSocket`] registered in its
//! connection registry; for tonic's `serve_with_incoming`, and for axum as a listener.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use actcd_edge::tls::cert_names::common_name;
use actcd_edge::tls::TlsServer;
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::either::Either;

use crate::transport::client_socket::ClientSocket;
use crate::transport::connection_budget::{accepted, handshakes, Accepted, ConnectionBudget};
use crate::transport::connections::Connections;

/// The `sockets` (through their TLS handshake on an https URL, see [`handshakes`]), registered
/// in `registry`, as a stream for tonic's `serve_with_incoming`. It never yields an error:
/// tonic retries a failed accept at once, which on EMFILE would spin; [`accept`] backs off.
pub fn incoming(
    sockets: BoxStream<'static, Accepted>,
    registry: Arc<Connections>,
    tls: Option<TlsServer>,
) -> BoxStream<'static, io::Result<ClientSocket>> {
    let Some(tls) = tls else {
        return sockets
            .map(move |(wire, permit, _)| {
                // Small requests and responses must not wait for Nagle.
                let _ = wire.set_nodelay(true);
                Ok(ClientSocket::new(Either::Left(wire), Some(permit), &registry, None))
            })
            .boxed();
    };
    let cn_is_user = tls.cn_is_user();
    ReceiverStream::new(handshakes(sockets, tls))
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
        Ok(Self { sockets: incoming(accepted(listener, budget), Arc::default(), tls), local })
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
