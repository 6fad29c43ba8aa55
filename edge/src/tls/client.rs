//! The dialing side of peer TLS: a member connects to another's https peer URL with its own
//! certificate (the `--peer-cert-file` pair, re-read as the listener re-reads it, or the
//! `--peer-auto-tls` one) and checks the listener's certificate as etcd does: against
//! `--peer-trusted-ca-file` and the URL's host, then the allowed CN or host name when one is
//! given. With auto TLS no CA vouches for anyone, and etcd's dialer skips the check
//! (`InsecureSkipVerify`); so does this one, still verifying the handshake's signatures.
//!
//! What is decided here from the flags is the client configuration; the dialing itself is the
//! peer transport's (`actcd_raft::network::tls_connector`).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

use super::cert_names::AllowedServers;
use super::{Basis, TlsError, TlsFlags, TlsServer};

/// Where Debian keeps the system's CA bundle: the roots a dialer trusts when no
/// `--peer-trusted-ca-file` is given (Go falls back to the system pool the same way).
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Both ends of peer TLS from the `--peer-*` flags, sharing one certificate: the listener's,
/// and the dialer's client configuration (offering HTTP/2 by ALPN).
pub fn peer(flags: &TlsFlags, hosts: &[String]) -> Result<(TlsServer, Arc<ClientConfig>), TlsError> {
    let basis = Basis::new(flags, hosts)?;
    Ok((TlsServer::with(flags, &basis)?.for_peers(), client_config(flags, &basis)?))
}

/// The client side of TLS for one set of flags.
fn client_config(flags: &TlsFlags, basis: &Basis) -> Result<Arc<ClientConfig>, TlsError> {
    let verifier: Arc<dyn ServerCertVerifier> = if basis.own.is_self_signed() {
        Arc::new(AnyServer(Arc::clone(&basis.provider)))
    } else {
        let roots = match basis.roots(flags)? {
            Some(roots) => roots,
            None => system_roots(),
        };
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&basis.provider))
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
    Ok(Arc::new(config))
}

fn system_roots() -> RootCertStore {
    use rustls_pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    if let Ok(certs) = CertificateDer::pem_file_iter(SYSTEM_ROOTS) {
        roots.add_parsable_certificates(certs.flatten());
    }
    roots
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
