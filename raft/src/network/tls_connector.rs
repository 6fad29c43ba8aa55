//! How a member dials another's https peer URL: TCP, then TLS over it, as a tower service that
//! tonic's channel dials through, so that one channel per member keeps reconnecting on its own,
//! TLS included. Which certificate this member presents and which listeners it trusts (the
//! `--peer-*` flags) is the edge's to decide: it hands over the client configuration built.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Dials TCP, then TLS over it, checking the listener's certificate against the URL's host.
/// It is given to tonic's `Endpoint::connect_with_connector_lazy`, whose URL must say
/// `http://` (tonic refuses an https URL it has no TLS of its own for): the TLS is added here.
#[derive(Clone, Debug)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl TlsConnector {
    /// Dials with `config`, which must offer HTTP/2 by ALPN.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self { config }
    }
}

type Dialing = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Dialing;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Dialing {
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{what}: {uri}"));
            let host = uri.host().ok_or_else(|| bad("a peer URL without a host"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let port = uri.port_u16().ok_or_else(|| bad("a peer URL without a port"))?;
            let name = ServerName::try_from(host.clone()).map_err(|_| bad("a peer URL's host is no name"))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            // Small Raft messages (heartbeats, one-write appends) leave at once.
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}
