//! The names a verified certificate carries, and etcd's checks on them: the subject Common
//! Name (with auth enabled, a client certificate's CN is the user), and `--peer-cert-allowed-cn`
//! / `--peer-cert-allowed-hostname`, which admit a peer only when its certificate names the
//! one CN, or is valid for the one host name, the operator gave.
//!
//! etcd applies the allowed name to both ends of a peer connection (its `baseConfig` sets the
//! check on the client and on the server configuration): the listener checks the dialing
//! member's client certificate, and the dialing member checks the listener's certificate. So
//! here the check wraps both of rustls' verifiers, and runs after the chain was verified: a
//! certificate that names the right CN but comes from another CA is refused by the chain.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// Allowed-name flags that cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AllowedNameError(String);

/// The subject Common Name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<Arc<str>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(Arc::from(cn))
}

/// The one name a peer's certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedName {
    /// `--peer-cert-allowed-cn`: the subject CN, exactly.
    CommonName(String),
    /// `--peer-cert-allowed-hostname`: a DNS or IP subject alternative name valid for this
    /// host, as a TLS client checks a server's name (Go's `VerifyHostname`).
    Hostname(ServerName<'static>),
}

impl AllowedName {
    /// The allowed name from the two flags, which etcd lets an operator give one of.
    pub fn from_flags(cn: Option<&str>, hostname: Option<&str>) -> Result<Option<Self>, AllowedNameError> {
        match (cn.filter(|c| !c.is_empty()), hostname.filter(|h| !h.is_empty())) {
            (None, None) => Ok(None),
            (Some(cn), None) => Ok(Some(Self::CommonName(cn.to_string()))),
            (None, Some(host)) => ServerName::try_from(host.to_string())
                .map(|name| Some(Self::Hostname(name)))
                .map_err(|e| AllowedNameError(format!("--peer-cert-allowed-hostname {host:?}: {e}"))),
            (Some(cn), Some(host)) => Err(AllowedNameError(format!(
                "AllowedCN and AllowedHostname are mutually exclusive (cn={cn:?}, hostname={host:?})"
            ))),
        }
    }

    /// Whether `end_entity` (already verified up to a trusted root) carries the name.
    pub fn admits(&self, end_entity: &CertificateDer<'_>) -> bool {
        match self {
            Self::CommonName(cn) => common_name(end_entity).is_some_and(|name| *name == **cn),
            Self::Hostname(host) => ParsedCertificate::try_from(end_entity)
                .is_ok_and(|cert| rustls::client::verify_server_name(&cert, host).is_ok()),
        }
    }

    /// `verified`, the chain's verdict on `end_entity`, if the certificate also carries the
    /// allowed name; etcd's refusal otherwise.
    fn vouch<T>(&self, end_entity: &CertificateDer<'_>, verified: T) -> Result<T, Error> {
        if self.admits(end_entity) {
            Ok(verified)
        } else {
            // etcd's words for the same refusal.
            Err(Error::General("client certificate authentication failed".into()))
        }
    }
}

/// The handshake-signature half of a rustls verifier that only adds a check on the chain:
/// the wrapped verifier's own (`self.inner`), unchanged. TLS 1.2's and 1.3's hooks take the
/// same arguments, so one template writes both.
macro_rules! signatures_by_inner {
    () => {
        signatures_by_inner!(verify_tls12_signature verify_tls13_signature);

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    };
    ($($verify:ident)+) => {$(
        fn $verify(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.inner.$verify(message, cert, dss)
        }
    )+};
}

/// A client certificate verifier that also wants the allowed name.
#[derive(Debug)]
pub struct AllowedClients {
    pub(super) inner: Arc<dyn ClientCertVerifier>,
    pub(super) name: AllowedName,
}

impl ClientCertVerifier for AllowedClients {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.name.vouch(end_entity, self.inner.verify_client_cert(end_entity, intermediates, now)?)
    }

    signatures_by_inner!();
}

/// A server certificate verifier that also wants the allowed name.
#[derive(Debug)]
pub struct AllowedServers {
    pub(super) inner: Arc<dyn ServerCertVerifier>,
    pub(super) name: AllowedName,
}

impl ServerCertVerifier for AllowedServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verified =
            self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        self.name.vouch(end_entity, verified)
    }

    signatures_by_inner!();
}

#[cfg(test)]
mod tests {
    use super::{common_name, AllowedName};
    use crate::tls::tests::certificate;

    /// The CN a member's certificate carries.
    const PEER_CN: &str = "actcd-peer";

    #[test]
    fn the_allowed_name_is_a_common_name_or_a_host_the_certificate_is_valid_for() {
        let der = certificate(PEER_CN, &["localhost", "127.0.0.1"]);
        let allowed =
            |cn: Option<&str>, host: Option<&str>| AllowedName::from_flags(cn, host).unwrap().unwrap();
        assert!(allowed(Some(PEER_CN), None).admits(&der));
        assert!(!allowed(Some("actcd"), None).admits(&der), "a CN matches exactly, not by prefix");
        assert!(allowed(None, Some("localhost")).admits(&der));
        assert!(allowed(None, Some("127.0.0.1")).admits(&der), "an IP address matches an IP SAN");
        assert!(!allowed(None, Some("example.com")).admits(&der));
        assert!(
            !allowed(None, Some(PEER_CN)).admits(&der),
            "a host name is looked up in the SANs, not the CN"
        );
        let wildcard = certificate(PEER_CN, &["*.example.com"]);
        assert!(allowed(None, Some("m1.example.com")).admits(&wildcard), "a wildcard SAN covers one label");
        assert!(!allowed(None, Some("a.m1.example.com")).admits(&wildcard));
        assert_eq!(AllowedName::from_flags(None, None).unwrap(), None);
        assert_eq!(AllowedName::from_flags(Some(""), Some("")).unwrap(), None, "empty flags are not given");
        let both = AllowedName::from_flags(Some("a"), Some("b")).unwrap_err().to_string();
        assert_eq!(both, r#"AllowedCN and AllowedHostname are mutually exclusive (cn="a", hostname="b")"#);
        let bad = AllowedName::from_flags(None, Some("no spaces allowed")).unwrap_err().to_string();
        assert!(bad.starts_with(r#"--peer-cert-allowed-hostname "no spaces allowed": "#), "{bad}");
    }

    #[test]
    fn the_common_name_is_the_subjects_and_nothing_else_is_one() {
        assert_eq!(common_name(&certificate("alice", &["bob"])).as_deref(), Some("alice"));
        assert_eq!(common_name(b"not a certificate"), None);
    }
}
