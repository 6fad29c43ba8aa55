//! TLS on the client URLs, with real handshakes: certificates made at test time (rcgen), etcdctl
//! with --cacert/--cert/--key against an https URL served beside the plain one, refusals at the
//! handshake (no client certificate, one from another CA, plaintext on the TLS port), the
//! certificate re-read when its files change, a revoked client certificate, and a handshake
//! restricted by --cipher-suites and --tls-max-version (checked with openssl s_client).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SerialNumber,
};

use crate::harness::{etcdctl_binary, free_port, Server};

/// A CA and the files of certificates it signed.
/// The names every certificate a test issues is valid for, unless it says otherwise.
const LOOPBACK_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

pub struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.distinguished_name.push(DnType::CommonName, name);
        Ca { cert: params.self_signed(&key).unwrap(), key }
    }

    /// Writes `<name>.pem` and `<name>-key.pem` under `dir`: a certificate for the loopback
    /// names, for a server or a client.
    fn issue(&self, dir: &Path, name: &str, purpose: ExtendedKeyUsagePurpose) -> (PathBuf, PathBuf) {
        self.issue_numbered(dir, name, purpose, None)
    }

    fn issue_numbered(
        &self,
        dir: &Path,
        name: &str,
        purpose: ExtendedKeyUsagePurpose,
        serial: Option<u64>,
    ) -> (PathBuf, PathBuf) {
        self.sign(dir, name, name, &[purpose], serial, &LOOPBACK_NAMES)
    }

    /// Writes `<file>.pem` and `<file>-key.pem` under `dir`: a certificate named `cn` for the
    /// loopback names, for both ends of a peer connection.
    pub fn issue_peer(&self, dir: &Path, file: &str, cn: &str) -> (PathBuf, PathBuf) {
        self.issue_peer_for(dir, file, cn, &LOOPBACK_NAMES)
    }

    /// [`Ca::issue_peer`] for the subject alternative names `sans` (IP addresses or DNS
    /// names) instead of the loopback names.
    pub fn issue_peer_for(&self, dir: &Path, file: &str, cn: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        self.sign(dir, file, cn, &[ServerAuth, ClientAuth], None, sans)
    }

    fn sign(
        &self,
        dir: &Path,
        file: &str,
        cn: &str,
        purposes: &[ExtendedKeyUsagePurpose],
        serial: Option<u64>,
        sans: &[&str],
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.serial_number = serial.map(SerialNumber::from);
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = purposes.to_vec();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (cert_file, key_file) = (dir.join(format!("{file}.pem")), dir.join(format!("{file}-key.pem")));
        // Written whole and renamed, as a certificate manager rotates them.
        for (path, text) in [(&key_file, key.serialize_pem()), (&cert_file, cert.pem())] {
            let staged = path.with_extension("tmp");
            std::fs::write(&staged, text).unwrap();
            std::fs::rename(&staged, path).unwrap();
        }
        (cert_file, key_file)
    }

    /// Writes `crl.pem` under `dir`, revoking the certificates numbered `serials`.
    fn revoke(&self, dir: &Path, serials: &[u64]) -> PathBuf {
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2024, 1, 1),
            next_update: date_time_ymd(2099, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: date_time_ymd(2024, 1, 1),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let path = dir.join("crl.pem");
        std::fs::write(&path, params.signed_by(&self.cert, &self.key).unwrap().pem().unwrap()).unwrap();
        path
    }

    /// Writes the CA's certificate to `ca.pem` under `dir`.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, self.cert.pem()).unwrap();
        path
    }
}

/// A data dir, and a CA with its file and a server certificate in a dir of their own.
struct Fixture {
    data: tempfile::TempDir,
    pki: tempfile::TempDir,
    ca: Ca,
    ca_file: PathBuf,
    server: (PathBuf, PathBuf),
}

impl Fixture {
    fn new() -> Fixture {
        let (data, pki) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let ca = Ca::new("actcd test CA");
        let ca_file = ca.write(pki.path());
        let server = ca.issue(pki.path(), "server", ExtendedKeyUsagePurpose::ServerAuth);
        Fixture { data, pki, ca, ca_file, server }
    }
}

/// The flags of an actcd serving `url` with `cert` and `key`, requiring client certificates
/// signed by `ca` when one is given, then `more`.
fn server_flags(url: &str, (cert, key): (&Path, &Path), ca: Option<&Path>, more: &[&str]) -> Vec<String> {
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut flags = vec!["--listen-client-urls".into(), url.into(), "--cert-file".into(), path(cert)];
    flags.extend(["--key-file".into(), path(key)]);
    if let Some(ca) = ca {
        flags.extend(["--trusted-ca-file".into(), path(ca), "--client-cert-auth".into()]);
    }
    flags.extend(more.iter().map(|m| m.to_string()));
    flags
}

fn etcdctl(endpoint: &str, tls: &[&Path], args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(etcdctl_binary());
    cmd.env("ETCDCTL_API", "3").args([
        "--endpoints",
        endpoint,
        "--dial-timeout",
        "3s",
        "--command-timeout",
        "5s",
    ]);
    for (flag, path) in ["--cacert", "--cert", "--key"].iter().zip(tls) {
        cmd.arg(flag).arg(path);
    }
    let out = cmd.args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// What `openssl s_client` sees of the server's certificate (its serial), or None when the
/// handshake fails.
fn served_serial(port: u16, extra: &[&str]) -> Option<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", "localhost"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("-----BEGIN CERTIFICATE-----") {
        return None;
    }
    let pem: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .take_while(|l| !l.starts_with("-----END CERTIFICATE-----"))
        .chain(["-----END CERTIFICATE-----"])
        .map(|l| format!("{l}\n"))
        .collect();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    x509.stdin.take().unwrap().write_all(pem.as_bytes()).unwrap();
    let serial = x509.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&serial.stdout).trim().to_string())
}

#[tokio::test]
async fn client_certificates_are_required_verified_and_rotated() {
    let Fixture { data, pki, ca, ca_file, server: (server_cert, server_key) } = Fixture::new();
    let (client_cert, client_key) = ca.issue(pki.path(), "client", ExtendedKeyUsagePurpose::ClientAuth);
    let stranger_dir = tempfile::tempdir().unwrap();
    let (other_cert, other_key) =
        Ca::new("another CA").issue(stranger_dir.path(), "stranger", ExtendedKeyUsagePurpose::ClientAuth);

    let port = free_port();
    let https = format!("https://127.0.0.1:{port}");
    let listen = https.clone();
    let metrics = format!("https://127.0.0.1:{}", free_port());
    let args = server_flags(
        &listen,
        (&server_cert, &server_key),
        Some(&ca_file),
        &["--listen-metrics-urls", &metrics],
    );
    // The launcher's plain URL stays (plain and TLS listeners at once, as etcd allows) and is
    // what it waits on.
    let server = Server::actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await;

    let good = [ca_file.as_path(), client_cert.as_path(), client_key.as_path()];
    let (ok, out) = etcdctl(&https, &good, &["put", "k", "over tls"]);
    assert!(ok, "{out}");
    let (ok, out) = etcdctl(&https, &good, &["get", "k", "--print-value-only"]);
    assert!(ok && out.trim() == "over tls", "{out}");
    let (ok, out) = etcdctl(&server.endpoint, &[], &["get", "k", "--print-value-only"]);
    assert!(ok && out.trim() == "over tls", "the plain URL serves the same store: {out}");

    let (ok, out) = etcdctl(&https, &[ca_file.as_path()], &["get", "k"]);
    assert!(!ok, "no client certificate must be refused: {out}");

    // The https metrics URL: the same files, HTTP/1.1, the client certificate required too.
    let curl = |cert: bool| {
        let mut c = Command::new("curl");
        c.args(["-sS", "--max-time", "5", "--cacert", ca_file.to_str().unwrap()]);
        if cert {
            c.args(["--cert", client_cert.to_str().unwrap(), "--key", client_key.to_str().unwrap()]);
        }
        let out = c.arg(format!("{metrics}/health")).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, body) = curl(true);
    assert!(ok && body.contains(r#""health":"true""#), "{body}");
    assert!(!curl(false).0, "/health over https without a client certificate must be refused");
    let stranger = [ca_file.as_path(), other_cert.as_path(), other_key.as_path()];
    let (ok, out) = etcdctl(&https, &stranger, &["get", "k"]);
    assert!(!ok, "a client certificate from another CA must be refused: {out}");
    let (ok, out) = etcdctl(&format!("http://127.0.0.1:{port}"), &[], &["get", "k"]);
    assert!(!ok, "plaintext on the TLS port must fail: {out}");
    // Garbage and half handshakes do not hold up anyone else.
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        use std::io::Write;
        let _ = s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        idle.push(s);
    }
    let (ok, out) = etcdctl(&https, &good, &["put", "k", "still served"]);
    assert!(ok, "{out}");

    // Rotation: new files at the same paths are served from the next handshake on.
    let client_args = [
        "-CAfile",
        ca_file.to_str().unwrap(),
        "-cert",
        client_cert.to_str().unwrap(),
        "-key",
        client_key.to_str().unwrap(),
    ];
    let before = served_serial(port, &client_args).expect("a handshake with the client certificate");
    ca.issue(pki.path(), "server", ExtendedKeyUsagePurpose::ServerAuth);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = served_serial(port, &client_args).expect("a handshake after the rotation");
        if now != before {
            break;
        }
        assert!(Instant::now() < deadline, "the rotated certificate was never served ({before})");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (ok, out) = etcdctl(&https, &good, &["get", "k", "--print-value-only"]);
    assert!(ok && out.trim() == "still served", "{out}");
    drop(idle);
}

#[tokio::test]
async fn cipher_suites_and_versions_restrict_the_handshake() {
    let Fixture { data, pki: _pki, ca: _, ca_file, server: (cert, key) } = Fixture::new();
    let port = free_port();
    let listen = format!("https://127.0.0.1:{port}");
    let restricted =
        ["--cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "--tls-max-version", "TLS1.2"];
    let args = server_flags(&listen, (&cert, &key), None, &restricted);
    let _server = Server::actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let ca = ["-CAfile", ca_file.to_str().unwrap()];
    assert!(served_serial(
        port,
        &[&ca[..], &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"]].concat()
    )
    .is_some());
    assert!(
        served_serial(port, &[&ca[..], &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]].concat())
            .is_none(),
        "a suite outside --cipher-suites must fail the handshake"
    );
    assert!(
        served_serial(port, &[&ca[..], &["-tls1_3"]].concat()).is_none(),
        "TLS 1.3 is above --tls-max-version"
    );
    let (ok, out) = etcdctl(&listen, &[ca_file.as_path()], &["put", "k", "v"]);
    assert!(ok, "etcdctl over the restricted TLS: {out}");

    // --auto-tls: a self-signed certificate, which a client accepts only when told to.
    let auto_dir = tempfile::tempdir().unwrap();
    let auto_url = format!("https://127.0.0.1:{}", free_port());
    let _auto =
        Server::actcd(auto_dir.path(), &["--listen-client-urls", auto_url.as_str(), "--auto-tls"]).await;
    let (ok, out) = etcdctl(
        &auto_url,
        &[],
        &["--insecure-transport=false", "--insecure-skip-tls-verify", "put", "a", "b"],
    );
    assert!(ok, "{out}");
    let (ok, out) = etcdctl(&auto_url, &[ca_file.as_path()], &["put", "a", "b"]);
    assert!(!ok, "a self-signed certificate is not one the test CA signed: {out}");

    // What rustls cannot do is refused at start, in one line.
    for (flags, says) in [
        (vec!["--cipher-suites", "TLS_RSA_WITH_AES_128_CBC_SHA"], "is not supported"),
        (vec!["--tls-min-version", "TLS1.1"], "is not supported"),
        (vec![], "must be provided for client url"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_actcd"));
        cmd.args(["--data-dir", dir.path().to_str().unwrap()])
            .args(["--listen-client-urls", &format!("https://127.0.0.1:{}", free_port())])
            .args(["--listen-metrics-urls", &format!("http://127.0.0.1:{}", free_port())]);
        if !flags.is_empty() {
            cmd.args(["--cert-file", cert.to_str().unwrap(), "--key-file", key.to_str().unwrap()]);
        }
        let out = cmd.args(&flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

#[tokio::test]
async fn a_revoked_client_certificate_is_refused() {
    let Fixture { data, pki, ca, ca_file, server: (cert, key) } = Fixture::new();
    let (kept, kept_key) =
        ca.issue_numbered(pki.path(), "kept", ExtendedKeyUsagePurpose::ClientAuth, Some(1001));
    let (revoked, revoked_key) =
        ca.issue_numbered(pki.path(), "revoked", ExtendedKeyUsagePurpose::ClientAuth, Some(1002));
    let crl = ca.revoke(pki.path(), &[1002]);
    let url = format!("https://127.0.0.1:{}", free_port());
    let args =
        server_flags(&url, (&cert, &key), Some(&ca_file), &["--client-crl-file", crl.to_str().unwrap()]);
    let _server = Server::actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let (ok, out) =
        etcdctl(&url, &[ca_file.as_path(), kept.as_path(), kept_key.as_path()], &["put", "k", "v"]);
    assert!(ok, "a certificate the CRL does not list: {out}");
    let (ok, out) =
        etcdctl(&url, &[ca_file.as_path(), revoked.as_path(), revoked_key.as_path()], &["put", "k", "v"]);
    assert!(!ok, "a revoked certificate must be refused: {out}");
}

/// With --client-cert-auth and auth enabled, a client certificate's Common Name is the user of
/// a request that carries no token; a token, when there is one, wins (as on etcd).
#[tokio::test]
async fn the_client_certificate_common_name_is_the_auth_user() {
    let Fixture { data, pki, ca, ca_file, server: (server_cert, server_key) } = Fixture::new();
    let (alice_cert, alice_key) = ca.issue(pki.path(), "alice", ExtendedKeyUsagePurpose::ClientAuth);
    let https = format!("https://127.0.0.1:{}", free_port());
    let args = server_flags(&https, (&server_cert, &server_key), Some(&ca_file), &["--bcrypt-cost", "4"]);
    let server = Server::actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let plain = |args: &[&str]| etcdctl(&server.endpoint, &[], args);
    for step in [
        vec!["user", "add", "root", "--new-user-password=rootpw"],
        vec!["auth", "enable"],
        vec!["--user=root:rootpw", "user", "add", "alice", "--no-password"],
        vec!["--user=root:rootpw", "role", "add", "r1"],
        vec!["--user=root:rootpw", "role", "grant-permission", "--prefix", "r1", "readwrite", "pre/"],
        vec!["--user=root:rootpw", "user", "grant-role", "alice", "r1"],
    ] {
        let (ok, out) = plain(&step);
        assert!(ok, "{step:?}: {out}");
    }
    let alice = [ca_file.as_path(), alice_cert.as_path(), alice_key.as_path()];
    let (ok, out) = etcdctl(&https, &alice, &["put", "pre/a", "by certificate"]);
    assert!(ok, "alice's certificate names alice: {out}");
    let (ok, out) = etcdctl(&https, &alice, &["put", "secret", "x"]);
    assert!(!ok && out.contains("etcdserver: permission denied"), "{out}");
    let (ok, out) = etcdctl(&https, &alice, &["--user=root:rootpw", "put", "secret", "x"]);
    assert!(ok, "the token of root wins over the certificate of alice: {out}");
    let (ok, out) = plain(&["put", "pre/b", "x"]);
    assert!(!ok && out.contains("etcdserver: user name is empty"), "no certificate on the plain URL: {out}");
    let (ok, out) = plain(&["--user=alice:anything", "get", "pre/a"]);
    assert!(!ok && out.contains("password was given for no password user"), "{out}");
}

/// A client that sends an IP address as its TLS server name (Node's grpc-js does on every
/// connection, though RFC 6066 allows host names alone there) is served, and leaves no WARN
/// line in the log: rustls warns of each such hello, a line per connection that no operator
/// can act on. A probe asked to exclude a check that does not exist, which does warn, shows
/// that the log would hold the line.
#[tokio::test]
async fn an_ip_address_server_name_logs_no_warning() {
    let Fixture { data, pki, ca: _, ca_file, server: (cert, key) } = Fixture::new();
    let port = free_port();
    let args = server_flags(&format!("https://127.0.0.1:{port}"), (&cert, &key), None, &[]);
    let log = pki.path().join("actcd.log");
    // Info, actcd's default level.
    let launch = Server::launch_actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>())
        .log_to(&log)
        .log_level("info");
    let server = Server::from(launch.start(Duration::from_secs(60)).await.unwrap());

    let by_ip = ["-CAfile", ca_file.to_str().unwrap(), "-servername", "127.0.0.1"];
    for _ in 0..3 {
        assert!(served_serial(port, &by_ip).is_some(), "the handshake completes");
    }
    let answer = crate::harness::http("GET", &server.metrics, "/readyz?exclude=no_such_check", "").await;
    assert_eq!(answer.status, 200);

    let text = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("some health checks cannot be excluded"), "{text}");
}

/// What curl says of one JSON request over https: the HTTP version it spoke, the status and
/// the body with the member's identity left out.
fn curl_json(ca: &Path, url: &str, version: &str, body: &str) -> (String, u16, serde_json::Value) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", version, "--cacert", ca.to_str().unwrap()])
        .args(["-H", "Content-Type: application/json", "-d", body])
        .args(["-w", "\n%{http_version} %{http_code}", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, trailer) = text.rsplit_once('\n').unwrap_or(("", &text));
    let (http, status) = trailer.split_once(' ').unwrap_or(("", "0"));
    let mut value: serde_json::Value = serde_json::from_str(json).unwrap_or(serde_json::Value::Null);
    if let Some(header) = value.get_mut("header").and_then(|h| h.as_object_mut()) {
        for field in ["cluster_id", "member_id", "raft_term"] {
            header.remove(field);
        }
    }
    (http.to_string(), status.parse().unwrap_or(0), value)
}

/// The same requests over HTTP/1.1 and over HTTP/2 (what curl's ALPN picks over TLS).
fn tls_gateway_session(ca: &Path, base: &str) -> Vec<(String, String, u16, serde_json::Value)> {
    let steps = [
        ("/v3/kv/put", r#"{"key":"Zm9v","value":"YmFy"}"#),
        ("/v3/kv/range", r#"{"key":"Zm9v"}"#),
        ("/v3/kv/put", r#"{"key":"Zm9v","value":"YmF6","prev_kv":true}"#),
        ("/v3/kv/range", r#"{"key":"Zm9v","count_only":true}"#),
        ("/v3/kv/deleterange", r#"{"key":"Zm9v"}"#),
        ("/v3/kv/range", r#"{"key":"Zm9v"}"#),
        ("/v3/kv/range", r#"{"key":"Zm9v","revision":"99"}"#),
    ];
    let mut answers = Vec::new();
    for version in ["--http1.1", "--http2"] {
        for (path, body) in steps {
            let (http, status, value) = curl_json(ca, &format!("{base}{path}"), version, body);
            answers.push((format!("{path} {body} {version}"), http, status, value));
        }
    }
    answers
}

/// Kills a process the test spawned when it goes out of scope.
struct Spawned(std::process::Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The JSON gateway over TLS, as Debian's etcd 3.4 serves it on an https client URL: curl's
/// requests over HTTP/1.1 and over HTTP/2 get the same answers, field by field.
#[tokio::test]
async fn the_gateway_answers_over_tls_as_etcds() {
    let Fixture { data, pki: _pki, ca: _, ca_file, server: (cert, key) } = Fixture::new();
    let etcd_dir = tempfile::tempdir().unwrap();
    let (etcd_url, peer) =
        (format!("https://127.0.0.1:{}", free_port()), format!("http://127.0.0.1:{}", free_port()));
    // Started by hand: the harness waits on a plain URL, which etcd would lose to this one.
    let etcd = Command::new(crate::harness::etcd_binary())
        .args(["--name", "tls", "--data-dir", etcd_dir.path().to_str().unwrap()])
        .args(["--listen-client-urls", &etcd_url, "--advertise-client-urls", &etcd_url])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("tls={peer}")])
        .args(["--cert-file", cert.to_str().unwrap(), "--key-file", key.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let etcd = Spawned(etcd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while curl_json(&ca_file, &format!("{etcd_url}/v3/kv/range"), "--http1.1", r#"{"key":"YQ=="}"#).1 != 200 {
        assert!(Instant::now() < deadline, "etcd did not serve {etcd_url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let on_etcd = tls_gateway_session(&ca_file, &etcd_url);
    drop(etcd);

    let actcd_url = format!("https://127.0.0.1:{}", free_port());
    let args = server_flags(&actcd_url, (&cert, &key), None, &[]);
    let _actcd = Server::actcd(data.path(), &args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let on_actcd = tls_gateway_session(&ca_file, &actcd_url);
    for (a, e) in on_actcd.iter().zip(&on_etcd) {
        assert_eq!(a, e);
    }
    assert_eq!(on_actcd.len(), on_etcd.len());
    assert_eq!(on_etcd[8].1, "2", "curl speaks HTTP/2 to etcd over TLS: {:?}", on_etcd[8]);
    assert_eq!(on_etcd[1].3["kvs"][0]["value"], "YmFy", "{:?}", on_etcd[1]);
}
