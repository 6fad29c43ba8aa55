//! TLS on the client and peer URLs, from etcd's flags, with rustls: the certificate and key
//! (re-read when either file changes, as etcd re-reads them on a handshake after a rotation),
//! client certificates verified against the trusted CA file and the CRL file when client
//! certificate auth asks for them, a self-signed pair with auto TLS, and the cipher suites and
//! protocol versions etcd lets an operator pick. The client URLs and the peer URLs each have
//! their own set of these flags ([`FlagNames`]); the peer set adds the allowed CN or host name
//! ([`cert_names`]) and the dialing side ([`client`]).
//!
//! What rustls cannot do is refused at start, never parsed and ignored: TLS 1.0 and 1.1, and
//! every cipher suite without forward secrecy or with CBC or RC4 (Go's crypto/tls still offers
//! them, so etcd's `--cipher-suites` accepts their names). etcd's rule stays: cipher suites
//! choose among TLS 1.2's; TLS 1.3 always offers its own three.
//!
//! # Layout
//! - here: the flags, and the listener's side of TLS.
//! - [`client`]: the dialing side of peer TLS (a member's own certificate, the listener's
//!   checked), as the client configuration the peer transport dials with.
//! - [`cert_names`]: a certificate's Common Name, and the allowed CN or host name of a peer.
//! - [`remote_san`]: a dialing member's certificate SANs against the address it came from.

pub mod cert_names;
pub mod client;
pub mod remote_san;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::ResolvesClientCert;
use rustls::crypto::{ring, CryptoProvider};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};

use self::cert_names::{AllowedClients, AllowedName};

/// How often a handshake looks at the files' modification times (a stat of two files).
const RECHECK: Duration = Duration::from_secs(1);

/// Why the TLS flags cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM block of the kind wanted.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which flag's file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A flag's value names nothing etcd knows.
    #[error("{0}")]
    Flag(String),
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Rustls(String),
}

/// What one set of TLS flags is called on the command line, for the messages that name them.
#[derive(Debug, PartialEq, Eq)]
pub struct FlagNames {
    /// The certificate file's flag.
    pub cert_file: &'static str,
    /// The key file's flag.
    pub key_file: &'static str,
    /// The trusted CA file's flag.
    pub trusted_ca_file: &'static str,
    /// The flag that requires client certificates.
    pub client_cert_auth: &'static str,
    /// The CRL file's flag.
    pub crl_file: &'static str,
    /// The self-signed certificate's flag.
    pub auto_tls: &'static str,
}

/// The client URLs' flags.
pub static CLIENT_FLAGS: FlagNames = FlagNames {
    cert_file: "--cert-file",
    key_file: "--key-file",
    trusted_ca_file: "--trusted-ca-file",
    client_cert_auth: "--client-cert-auth",
    crl_file: "--client-crl-file",
    auto_tls: "--auto-tls",
};

/// The peer URLs' flags.
pub static PEER_FLAGS: FlagNames = FlagNames {
    cert_file: "--peer-cert-file",
    key_file: "--peer-key-file",
    trusted_ca_file: "--peer-trusted-ca-file",
    client_cert_auth: "--peer-client-cert-auth",
    crl_file: "--peer-crl-file",
    auto_tls: "--peer-auto-tls",
};

/// One set of etcd's TLS flags (the client URLs' or the peer URLs').
#[derive(Debug, Clone)]
pub struct TlsFlags {
    /// Which set: the flags' names in messages.
    pub names: &'static FlagNames,
    /// `--cert-file`.
    pub cert_file: Option<PathBuf>,
    /// `--key-file`.
    pub key_file: Option<PathBuf>,
    /// `--trusted-ca-file`.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--client-cert-auth`.
    pub client_cert_auth: bool,
    /// `--client-crl-file`.
    pub crl_file: Option<PathBuf>,
    /// `--auto-tls`: a self-signed certificate for these host names when no files are given.
    pub auto_tls: bool,
    /// `--peer-cert-allowed-cn` or `--peer-cert-allowed-hostname` (peers only).
    pub allowed_name: Option<AllowedName>,
    /// `--cipher-suites` (Go's names).
    pub cipher_suites: Vec<String>,
    /// `--tls-min-version`.
    pub min_version: Option<String>,
    /// `--tls-max-version`.
    pub max_version: Option<String>,
}

/// No TLS: the client URLs' set with nothing given.
impl Default for TlsFlags {
    fn default() -> Self {
        Self {
            names: &CLIENT_FLAGS,
            cert_file: None,
            key_file: None,
            trusted_ca_file: None,
            client_cert_auth: false,
            crl_file: None,
            auto_tls: false,
            allowed_name: None,
            cipher_suites: Vec::new(),
            min_version: None,
            max_version: None,
        }
    }
}

impl TlsFlags {
    /// True when the flags give a certificate (files or auto TLS).
    pub fn has_certificate(&self) -> bool {
        (self.cert_file.is_some() && self.key_file.is_some()) || self.auto_tls
    }
}

/// What both ends of one set of flags share: the crypto provider with the chosen suites, the
/// protocol versions, and this process's own certificate (served by a listener, presented by
/// a dialing peer).
struct Basis {
    provider: Arc<CryptoProvider>,
    versions: Vec<&'static SupportedProtocolVersion>,
    own: Arc<OwnCert>,
}

impl Basis {
    /// Reads the flags; `hosts` names the self-signed certificate of auto TLS.
    fn new(flags: &TlsFlags, hosts: &[String]) -> Result<Self, TlsError> {
        let mut provider = ring::default_provider();
        let versions = versions(flags.min_version.as_deref(), flags.max_version.as_deref())?;
        if !flags.cipher_suites.is_empty() {
            if !versions.iter().any(|v| v.version == rustls::ProtocolVersion::TLSv1_2) {
                return Err(TlsError::Flag(
                    "cipher suites cannot be configured when only TLS1.3 is enabled".into(),
                ));
            }
            provider.cipher_suites = cipher_suites(&flags.cipher_suites)?;
        }
        let provider = Arc::new(provider);
        let names = flags.names;
        let own = match (&flags.cert_file, &flags.key_file) {
            (Some(cert), Some(key)) => {
                OwnCert::Files(ReloadingCert::load(names, cert, key, Arc::clone(&provider))?)
            }
            (None, None) if flags.auto_tls => OwnCert::SelfSigned(self_signed(hosts, &provider)?),
            _ => {
                return Err(TlsError::Flag(format!(
                    "{} and {} must be given together",
                    names.cert_file, names.key_file
                )))
            }
        };
        Ok(Self { provider, versions, own: Arc::new(own) })
    }

    /// The trusted CA file's certificates, when one is given.
    fn roots(&self, flags: &TlsFlags) -> Result<Option<RootCertStore>, TlsError> {
        let Some(ca) = &flags.trusted_ca_file else { return Ok(None) };
        let what = flags.names.trusted_ca_file;
        let mut roots = RootCertStore::empty();
        for cert in pem_certs(what, ca)? {
            roots.add(cert).map_err(|e| file_error(what, ca, e))?;
        }
        Ok(Some(roots))
    }
}

/// The server side of TLS for one set of flags.
#[derive(Clone)]
pub struct TlsServer {
    config: Arc<ServerConfig>,
    cn_is_user: bool,
    peers: bool,
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServer").field("alpn", &self.config.alpn_protocols).finish()
    }
}

impl TlsServer {
    /// Reads the flags; `hosts` names the self-signed certificate of auto TLS.
    pub fn new(flags: &TlsFlags, hosts: &[String]) -> Result<Self, TlsError> {
        Self::with(flags, &Basis::new(flags, hosts)?)
    }

    fn with(flags: &TlsFlags, basis: &Basis) -> Result<Self, TlsError> {
        let names = flags.names;
        let builder = ServerConfig::builder_with_provider(Arc::clone(&basis.provider))
            .with_protocol_versions(&basis.versions)
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        // etcd 3.4 requires and verifies client certificates as soon as a trusted CA file is
        // given, with or without the client-cert-auth flag (pkg/transport's ServerConfig); the
        // flag alone (without a CA) is refused here, where Go would verify against nothing.
        let builder = if flags.client_cert_auth || flags.trusted_ca_file.is_some() {
            let Some(roots) = basis.roots(flags)? else {
                return Err(TlsError::Flag(format!(
                    "{} needs {}",
                    names.client_cert_auth, names.trusted_ca_file
                )));
            };
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&basis.provider));
            if let Some(crl) = &flags.crl_file {
                let crls = CertificateRevocationListDer::pem_file_iter(crl)
                    .map_err(|e| file_error(names.crl_file, crl, e))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| file_error(names.crl_file, crl, e))?;
                verifier = verifier.with_crls(crls);
            }
            let verifier = verifier.build().map_err(|e| TlsError::Rustls(e.to_string()))?;
            match &flags.allowed_name {
                Some(name) => builder.with_client_cert_verifier(Arc::new(AllowedClients {
                    inner: verifier,
                    name: name.clone(),
                })),
                None => builder.with_client_cert_verifier(verifier),
            }
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder.with_cert_resolver(Arc::clone(&basis.own) as Arc<dyn ResolvesServerCert>);
        // gRPC is HTTP/2 only, and grpc-go clients refuse a server that does not say h2; the
        // JSON gateway and /health on the same port are HTTP/1.1 too, as etcd's net/http
        // offers both (a client that offers both gets h2: the server's order wins).
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self { config: Arc::new(config), cn_is_user: flags.client_cert_auth, peers: false })
    }

    /// Whether a verified client certificate's Common Name is the auth user: on etcd only with
    /// client-cert-auth itself, not with a trusted CA file alone.
    pub fn cn_is_user(&self) -> bool {
        self.cn_is_user
    }

    /// The same TLS for a peer listener: after each handshake a client certificate's SANs
    /// must name the address it came from (etcd's checkSAN, [`remote_san`]), and a
    /// refused connection is logged at warn (a member that cannot get in is an operator's
    /// problem; on the client port a scan or a plaintext client is not, and floods would fill
    /// the log).
    pub fn for_peers(self) -> Self {
        // A peer port serves only the Raft gRPC service.
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Self { config: Arc::new(config), peers: true, ..self }
    }

    /// Whether [`TlsServer::for_peers`] made this.
    pub fn is_peer(&self) -> bool {
        self.peers
    }

    /// The same TLS for an HTTP/1.1 server (the metrics URLs): ALPN says http/1.1, not h2.
    pub fn for_http1(&self) -> Self {
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self { config: Arc::new(config), ..*self }
    }

    /// An acceptor for one handshake.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.config))
    }
}

/// This process's certificate: the files' (re-read when they change) or auto TLS's.
#[derive(Debug)]
enum OwnCert {
    Files(ReloadingCert),
    SelfSigned(Arc<CertifiedKey>),
}

impl OwnCert {
    fn current(&self) -> Option<Arc<CertifiedKey>> {
        match self {
            Self::Files(files) => files.current(),
            Self::SelfSigned(key) => Some(Arc::clone(key)),
        }
    }

    /// True for auto TLS's certificate, which no CA vouches for.
    fn is_self_signed(&self) -> bool {
        matches!(self, Self::SelfSigned(_))
    }
}

impl ResolvesServerCert for OwnCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

impl ResolvesClientCert for OwnCert {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.current()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn file_error(what: &'static str, path: &Path, reason: impl fmt::Display) -> TlsError {
    TlsError::File { what, path: path.to_path_buf(), reason: reason.to_string() }
}

fn pem_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(file_error(what, path, "no CERTIFICATE block"));
    }
    Ok(certs)
}

fn certified_key(
    names: &FlagNames,
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let certs = pem_certs(names.cert_file, cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(names.key_file, key, e))?;
    let signing =
        provider.key_provider.load_private_key(key_der).map_err(|e| file_error(names.key_file, key, e))?;
    let certified = CertifiedKey::new(certs, signing);
    certified
        .keys_match()
        .map_err(|e| file_error(names.key_file, key, format!("does not match {}: {e}", names.cert_file)))?;
    Ok(certified)
}

/// TLS 1.2 and 1.3 between etcd's `--tls-min-version` and `--tls-max-version`.
fn versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    let rank = |flag: &str, v: &str| match v {
        "TLS1.2" => Ok(2),
        "TLS1.3" => Ok(3),
        "TLS1.0" | "TLS1.1" => Err(TlsError::Flag(format!(
            "{flag} {v} is not supported: actcd's TLS library (rustls) speaks TLS1.2 and TLS1.3 only"
        ))),
        other => {
            Err(TlsError::Flag(format!("unexpected TLS version {other:?} (must be one of: TLS1.2, TLS1.3)")))
        }
    };
    let lo = min.map(|v| rank("--tls-min-version", v)).transpose()?.unwrap_or(2);
    let hi = max.map(|v| rank("--tls-max-version", v)).transpose()?.unwrap_or(3);
    if lo > hi {
        return Err(TlsError::Flag(format!(
            "--tls-max-version {} is lower than --tls-min-version {}",
            max.unwrap_or_default(),
            min.unwrap_or_default()
        )));
    }
    Ok([(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(rank, _)| (lo..=hi).contains(rank))
        .map(|(_, v)| v)
        .collect())
}

/// TLS 1.3's suites, then the TLS 1.2 suites named (Go's names, as etcd takes them).
fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    use ring::cipher_suite as cs;
    let mut suites =
        vec![cs::TLS13_AES_128_GCM_SHA256, cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_CHACHA20_POLY1305_SHA256];
    for name in names {
        let suite = match name.as_str() {
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
                cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            }
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
                cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            }
            "TLS_RSA_WITH_RC4_128_SHA"
            | "TLS_RSA_WITH_3DES_EDE_CBC_SHA"
            | "TLS_RSA_WITH_AES_128_CBC_SHA"
            | "TLS_RSA_WITH_AES_256_CBC_SHA"
            | "TLS_RSA_WITH_AES_128_CBC_SHA256"
            | "TLS_RSA_WITH_AES_128_GCM_SHA256"
            | "TLS_RSA_WITH_AES_256_GCM_SHA384"
            | "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"
            | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
            | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
            | "TLS_ECDHE_RSA_WITH_RC4_128_SHA"
            | "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"
            | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
            | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"
            | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"
            | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256" => {
                return Err(TlsError::Flag(format!(
                    "TLS cipher suite {name:?} is not supported: actcd's TLS library (rustls) offers only ECDHE with AES-GCM or ChaCha20-Poly1305"
                )))
            }
            _ => return Err(TlsError::Flag(format!("unexpected TLS cipher suite {name:?}"))),
        };
        if !suites.iter().any(|s| s.suite() == suite.suite()) {
            suites.push(suite);
        }
    }
    Ok(suites)
}

/// The files' certificate, re-read when either file's modification time changes. A file
/// caught half written keeps the old pair (and the next check tries again).
struct ReloadingCert {
    names: &'static FlagNames,
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<Loaded>,
}

struct Loaded {
    stamps: (Option<SystemTime>, Option<SystemTime>),
    key: Arc<CertifiedKey>,
    checked: Instant,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl ReloadingCert {
    fn load(
        names: &'static FlagNames,
        cert_file: &Path,
        key_file: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, TlsError> {
        let stamps = (modified(cert_file), modified(key_file));
        let key = Arc::new(certified_key(names, cert_file, key_file, &provider)?);
        Ok(Self {
            names,
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            state: Mutex::new(Loaded { stamps, key, checked: Instant::now() }),
        })
    }

    /// The pair to hand out now, re-read first when the files changed.
    fn current(&self) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().ok()?;
        if state.checked.elapsed() >= RECHECK {
            state.checked = Instant::now();
            let stamps = (modified(&self.cert_file), modified(&self.key_file));
            if stamps != state.stamps {
                let flag = self.names.cert_file;
                match certified_key(self.names, &self.cert_file, &self.key_file, &self.provider) {
                    Ok(key) => {
                        tracing::info!(cert = %self.cert_file.display(), flag, "reloaded the TLS certificate");
                        state.key = Arc::new(key);
                        state.stamps = stamps;
                    }
                    Err(err) => tracing::warn!(%err, flag, "keeping the previous TLS certificate"),
                }
            }
        }
        Some(Arc::clone(&state.key))
    }
}

fn self_signed(hosts: &[String], provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
    let mut names: Vec<String> = hosts.to_vec();
    names.push("localhost".into());
    names.sort();
    names.dedup();
    let generated =
        rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Rustls(format!("auto TLS: {e}")))?;
    let key_der = PrivateKeyDer::try_from(generated.key_pair.serialize_der())
        .map_err(|e| TlsError::Rustls(format!("auto TLS: {e}")))?;
    let signing =
        provider.key_provider.load_private_key(key_der).map_err(|e| TlsError::Rustls(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(vec![generated.cert.der().clone()], signing)))
}

#[cfg(test)]
mod tests {
    use rustls_pki_types::CertificateDer;

    use super::{client, remote_san, TlsFlags, TlsServer, CLIENT_FLAGS, PEER_FLAGS};

    /// The TLS flags' checks, without a handshake.
    #[test]
    fn versions_and_suites_follow_etcd_and_refuse_what_rustls_cannot_do() {
        let refused =
            |flags: TlsFlags| TlsServer::new(&flags, &["127.0.0.1".into()]).err().map(|e| e.to_string());
        let auto = || TlsFlags { auto_tls: true, ..TlsFlags::default() };
        assert_eq!(refused(auto()), None);
        assert_eq!(refused(TlsFlags { min_version: Some("TLS1.3".into()), ..auto() }), None);
        assert_eq!(refused(TlsFlags { max_version: Some("TLS1.2".into()), ..auto() }), None);
        let old = refused(TlsFlags { min_version: Some("TLS1.0".into()), ..auto() }).unwrap();
        assert!(old.contains("not supported"), "{old}");
        assert_eq!(
            refused(TlsFlags { min_version: Some("SSL3".into()), ..auto() }).unwrap(),
            "unexpected TLS version \"SSL3\" (must be one of: TLS1.2, TLS1.3)"
        );
        assert!(refused(TlsFlags {
            min_version: Some("TLS1.3".into()),
            max_version: Some("TLS1.2".into()),
            ..auto()
        })
        .is_some());
        let suite = |name: &str| TlsFlags { cipher_suites: vec![name.into()], ..auto() };
        assert_eq!(refused(suite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")), None);
        let cbc = refused(suite("TLS_RSA_WITH_AES_128_CBC_SHA")).unwrap();
        assert!(cbc.contains("not supported"), "{cbc}");
        assert_eq!(refused(suite("TLS_NOPE")).unwrap(), "unexpected TLS cipher suite \"TLS_NOPE\"");
        let only_13 =
            TlsFlags { min_version: Some("TLS1.3".into()), ..suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") };
        assert_eq!(
            refused(only_13).unwrap(),
            "cipher suites cannot be configured when only TLS1.3 is enabled"
        );
        let half = TlsFlags { cert_file: Some("c.pem".into()), ..TlsFlags::default() };
        assert!(refused(half).is_some());
    }

    /// A self-signed certificate (DER) with the subject CN `cn` and the SANs `sans` (each an IP
    /// address or a DNS name), for the name checks that read a certificate already verified.
    pub(super) fn certificate(cn: &str, sans: &[&str]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().der().clone()
    }

    /// Each set's refusals name its own flags.
    #[test]
    fn refusals_name_the_flags_of_their_set() {
        let refused = |flags: TlsFlags| TlsServer::new(&flags, &[]).err().map(|e| e.to_string());
        let auth = |names| TlsFlags { names, auto_tls: true, client_cert_auth: true, ..TlsFlags::default() };
        assert_eq!(refused(auth(&CLIENT_FLAGS)).unwrap(), "--client-cert-auth needs --trusted-ca-file");
        assert_eq!(
            refused(auth(&PEER_FLAGS)).unwrap(),
            "--peer-client-cert-auth needs --peer-trusted-ca-file"
        );
        let key_only = TlsFlags { names: &PEER_FLAGS, key_file: Some("k.pem".into()), ..TlsFlags::default() };
        assert_eq!(refused(key_only).unwrap(), "--peer-cert-file and --peer-key-file must be given together");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let files = TlsFlags {
            cert_file: Some(missing.clone()),
            key_file: Some(missing.clone()),
            ..TlsFlags::default()
        };
        let err = refused(files).unwrap();
        assert!(err.starts_with(&format!("--cert-file {}: ", missing.display())), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let files =
            TlsFlags { cert_file: Some(empty.clone()), key_file: Some(empty.clone()), ..TlsFlags::default() };
        assert_eq!(refused(files).unwrap(), format!("--cert-file {}: no CERTIFICATE block", empty.display()));
    }

    #[test]
    fn a_certificate_is_files_or_auto_tls() {
        assert!(!TlsFlags::default().has_certificate());
        assert!(TlsFlags { auto_tls: true, ..TlsFlags::default() }.has_certificate());
        let half = TlsFlags { cert_file: Some("c".into()), ..TlsFlags::default() };
        assert!(!half.has_certificate());
        assert!(TlsFlags { key_file: Some("k".into()), ..half }.has_certificate());
    }

    /// Both ends of peer auto TLS over loopback: the dialer takes the listener's self-signed
    /// certificate (no CA vouches for it), made for the listener's hosts, and both agree on
    /// HTTP/2.
    #[tokio::test]
    async fn peer_auto_tls_ends_shake_hands_over_h2() {
        let flags = TlsFlags { names: &PEER_FLAGS, auto_tls: true, ..TlsFlags::default() };
        let (server, client) = client::peer(&flags, &["127.0.0.1".into()]).unwrap();
        assert!(server.is_peer() && !server.cn_is_user());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = server.acceptor();
        let accepted = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = acceptor.accept(tcp).await.unwrap();
            tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
        });
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let dialed = tokio_rustls::TlsConnector::from(client).connect(name, tcp).await.unwrap();
        let (_, session) = dialed.get_ref();
        assert_eq!(session.alpn_protocol(), Some(&b"h2"[..]));
        let served = session.peer_certificates().unwrap();
        let names = remote_san::AltNames::of(&served[0]);
        assert_eq!(names.ips, ["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]);
        assert_eq!(names.dns, ["localhost"]);
        assert_eq!(accepted.await.unwrap(), Some(b"h2".to_vec()));
    }
}
