//! The dialing side of peer TLS: a member connects to another's https peer URL with its own
//! certificate (the `--peer-cert-file` pair, re-read as the listener re-reads it, or the
//! `--peer-auto-tls` one) and checks the listener's certificate as etcd does: against
//! `--peer-trusted-ca-file` and the URL's host, then the allowed CN or host name when one is
//! given. With auto TLS no CA vouches for anyone, and etcd's dialer skips the check
//! (`InsecureSkipVerify`); so does this one, still verifying the handshake's signatures.
//!
//! The connector is a tower service tonic's channel dials through, so one channel per member
//! keeps reconnecting on its own, TLS included.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::cert_names::AllowedServers;
use super::{Basis, TlsError, TlsFlags, TlsServer};

/// Where Debian keeps the system's CA bundle: the roots a dialer trusts when no
/// `--peer-trusted-ca-file` is given (Go falls back to the system pool the same way).
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Both ends of peer TLS from the `--peer-*` flags, sharing one certificate.
pub fn peer(flags: &TlsFlags, hosts: &[String]) -> Result<(TlsServer, TlsClient), TlsError> {
    let basis = Basis::new(flags, hosts)?;
    Ok((TlsServer::with(flags, &basis)?.for_peers(), TlsClient::with(flags, &basis)?))
}

/// The client side of TLS for one set of flags.
#[derive(Clone, Debug)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
}

impl TlsClient {
    fn with(flags: &TlsFlags, basis: &Basis) -> Result<Self, TlsError> {
        let verifier: Arc<dyn ServerCertVerifier> = if basis.own.is_self_signed() {
            Arc::new(AnyServer(Arc::clone(&basis.provider)))
        } else {
            let roots = match basis.roots(flags)? {
                Some(roots) => roots,
                None => system_roots(),
            };
            let inner =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&basis.provider))
                    .build()
                    .map_err(|e| TlsError::Rustls(e.to_string()))?;
            match &flags.allowed_name {
                Some(name) => Arc::new(AllowedServers { inner, name: name.clone() }),
                None => inner,
            }
        };
        let mut config = ClientConfig::builder_with_provider(Arc::clone(&basis.provider))
            .with_protocol_versions(&basis.versions)
            .map_err(|e| TlsError::Rustls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(Arc::clone(&basis.own) as Arc<dyn ResolvesClientCert>);
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self { config: Arc::new(config) })
    }

    /// A connector for tonic's `Endpoint::connect_with_connector_lazy`. The endpoint's URL
    /// must say `http://` (tonic refuses an https URL it has no TLS of its own for); the
    /// connector adds the TLS, and checks the listener's certificate against the URL's host.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector { config: Arc::clone(&self.config) }
    }
}

fn system_roots() -> RootCertStore {
    use rustls_pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    if let Ok(certs) = CertificateDer::pem_file_iter(SYSTEM_ROOTS) {
        roots.add_parsable_certificates(certs.flatten());
    }
    roots
}

/// Dials TCP, then TLS over it (see [`TlsClient::connector`]).
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

type Dialing = Pin<Box<dyn Future<Output = io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower::Service<http::Uri> for TlsConnector {
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

/// Auto TLS's dialer: any certificate is taken (no CA vouches for a self-signed one), and
/// the handshake is still signed by the certificate's key.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
