//! TLS on the peer URLs, with real handshakes between members on loopback: three members on
//! https peer URLs with `--peer-client-cert-auth` and `--peer-cert-allowed-cn` form a cluster
//! and replicate; at the peer port, a certificate from another CA, one of the right CA with
//! another CN, no certificate and plaintext are refused at the handshake, while the right
//! certificate gets Raft's answers; a member restarted with a certificate from another CA never
//! gets back in (its peers refuse it, it refuses them), and is back with its own certificate.
//! `--peer-auto-tls` forms a cluster of self-signed members. The allowed-name and SAN rules
//! themselves are unit tests of edge/src/tls/.

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use actcd_edge::tls::{client as tls_client, TlsFlags, PEER_FLAGS};
use actcd_proto::actcdpeerpb::peer_client::PeerClient;
use actcd_proto::actcdpeerpb::Frame;
use actcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use actcd_proto::etcdserverpb::StatusRequest;
use actcd_raft::network::tls_connector::TlsConnector;
use actcd_test_support::server::Kind;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::cluster::Cluster;
use crate::harness::free_port;
use crate::tls::Ca;

/// The CN every member's certificate carries, and `--peer-cert-allowed-cn` admits.
const PEER_CN: &str = "actcd-peer";

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// A member's peer flags: its own certificate, the cluster's CA, client certificates required
/// (by the flag, or, as on etcd 3.4, by the CA file alone when `require` is false) and the
/// allowed CN.
fn member_flags(cert: &(PathBuf, PathBuf), ca: &Path, require: bool) -> Vec<String> {
    let mut flags = vec![
        "--peer-cert-file".into(),
        path(&cert.0),
        "--peer-key-file".into(),
        path(&cert.1),
        "--peer-trusted-ca-file".into(),
        path(ca),
        format!("--peer-cert-allowed-cn={PEER_CN}"),
    ];
    if require {
        flags.push("--peer-client-cert-auth".into());
    }
    flags
}

/// A peer client of the port `port` dialed through actcd's own peer dialer with `cert` (or a
/// self-signed one), trusting `ca`.
async fn peer_client(
    port: u16,
    cert: Option<&(PathBuf, PathBuf)>,
    ca: &Path,
) -> PeerClient<tonic::transport::Channel> {
    let flags = TlsFlags {
        names: &PEER_FLAGS,
        cert_file: cert.map(|c| c.0.clone()),
        key_file: cert.map(|c| c.1.clone()),
        // Auto TLS's dialer also skips checking the listener's certificate: what is tested
        // then is the listener's refusal alone.
        auto_tls: cert.is_none(),
        trusted_ca_file: Some(ca.to_path_buf()),
        ..TlsFlags::default()
    };
    let (_, tls) = tls_client::peer(&flags, &[]).unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(3))
        .connect_with_connector_lazy(TlsConnector::new(tls));
    PeerClient::new(channel)
}

/// Whether the listener on `port` speaks HTTP/2 to a TLS client trusting `ca` that presents
/// `cert`, or no certificate at all (rustls' own client, not actcd's dialer): its SETTINGS
/// frame arrives after the preface, where a refused client gets an alert.
async fn speaks_http2(port: u16, cert: Option<&(PathBuf, PathBuf)>, ca: &Path) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(cert).unwrap()],
                rustls_pki_types::PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let Ok(mut tls) = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await
    else {
        return false;
    };
    if tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.is_err() {
        return false;
    }
    let mut header = [0u8; 9];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_exact(&mut header)).await;
    // A frame header whose type byte is SETTINGS (4).
    matches!(read, Ok(Ok(_))) && header[3] == 4
}

/// Asks for a read index with `client`: Ok when a member's Raft answered at all (a read
/// index, or a refusal in the body), Err with the status when the call never got there.
async fn raft_answers(
    client: &mut PeerClient<tonic::transport::Channel>,
    cluster_id: u64,
) -> Result<(), tonic::Status> {
    let frame = Frame { cluster_id, from: 7, body: Vec::new().into(), seq: 0 };
    match tokio::time::timeout(Duration::from_secs(5), client.read_index(frame)).await {
        Ok(answer) => answer.map(|_| ()),
        Err(_) => Err(tonic::Status::deadline_exceeded("no answer in 5 s")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_on_https_peer_urls_admit_only_their_own_certificates() {
    let (pki, strange) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ca = Ca::new("actcd peer CA");
    let ca_file = ca.write(pki.path());
    let certs: Vec<_> = (1..=3).map(|i| ca.issue_peer(pki.path(), &format!("m{i}"), PEER_CN)).collect();
    let other_ca = Ca::new("another CA");
    other_ca.write(strange.path());
    let stranger = other_ca.issue_peer(strange.path(), "stranger", PEER_CN);
    let wrong_cn = ca.issue_peer(pki.path(), "intruder", "intruder");
    // The right CA and CN, but valid for another host than the one it dials from.
    let elsewhere = ca.issue_peer_for(pki.path(), "elsewhere", PEER_CN, &["10.1.2.3"]);
    let no_sans = ca.issue_peer_for(pki.path(), "bare", PEER_CN, &[]);

    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers = ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
    let each = certs.iter().enumerate().map(|(i, c)| member_flags(c, &ca_file, i != 2)).collect();
    let mut cluster = Cluster::start_each(Kind::Actcd, peers, &[], each).await;
    let leader = cluster.leader().await;
    let (ok, out, err) = cluster.etcdctl(&["put", "over", "peer tls"]);
    assert!(ok, "{out}{err}");
    let mut status = MaintenanceClient::connect(cluster.member(0).endpoint.clone()).await.unwrap();
    let status = status.status(StatusRequest {}).await.unwrap().into_inner();
    let cluster_id = status.header.as_ref().unwrap().cluster_id;
    cluster.wait_for_equal_hashes(status.header.as_ref().unwrap().revision).await;

    // At every member's peer port (the third requires certificates by its CA file alone):
    // the right certificate reaches Raft ...
    for port in ports.iter().copied() {
        raft_answers(&mut peer_client(port, Some(&certs[0]), &ca_file).await, cluster_id)
            .await
            .expect("a member's own certificate is admitted");
        raft_answers(&mut peer_client(port, Some(&no_sans), &ca_file).await, cluster_id)
            .await
            .expect("a certificate that names no host is not held to one");
        // ... nothing else gets past the handshake.
        assert!(
            speaks_http2(port, Some(&certs[1]), &ca_file).await,
            "a member's certificate, by rustls' client"
        );
        assert!(!speaks_http2(port, None, &ca_file).await, "no client certificate");
        let refused = [
            ("another CA", Some(&stranger)),
            ("another CN", Some(&wrong_cn)),
            ("another host's SANs", Some(&elsewhere)),
            ("self-signed", None),
        ];
        for (what, cert) in refused {
            let refused = raft_answers(&mut peer_client(port, cert, &ca_file).await, cluster_id).await;
            let status = refused.expect_err(what);
            // Refused during the handshake, or by an alert right after it (TLS 1.3, where the
            // client's certificate is checked once the client thinks it is done): either way
            // a transport failure (the status has a transport cause), never a gRPC answer.
            assert!(status.source().is_some(), "{what}: {status:?}");
        }
        let mut plain = PeerClient::new(
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
                .unwrap()
                .connect_lazy(),
        );
        assert!(raft_answers(&mut plain, cluster_id).await.is_err(), "plaintext on the TLS peer port");
    }

    // A member restarted with a certificate of another CA is refused by its peers and refuses
    // them: it never hears from a leader, so never answers a linearizable read.
    let follower = (0..3).find(|i| *i != leader).unwrap();
    cluster.kill(follower);
    let own = certs[follower].clone();
    let swap = |from: &(PathBuf, PathBuf)| {
        std::fs::copy(&from.0, &own.0).unwrap();
        std::fs::copy(&from.1, &own.1).unwrap();
    };
    let saved = (pki.path().join("saved.pem"), pki.path().join("saved-key.pem"));
    std::fs::copy(&own.0, &saved.0).unwrap();
    std::fs::copy(&own.1, &saved.1).unwrap();
    swap(&stranger);
    let shut_out = cluster.launch(follower).start(Duration::from_secs(8)).await;
    assert!(shut_out.is_err(), "a member with another CA's certificate must not get in");
    let (ok, out, err) = cluster.etcdctl(&["put", "without", "the stranger"]);
    assert!(ok, "the other two members still serve: {out}{err}");

    // With its own certificate back, it catches up.
    swap(&saved);
    cluster.restart(follower).await;
    let (ok, out, err) = cluster.etcdctl(&["get", "without", "--print-value-only"]);
    assert!(ok && out.trim() == "the stranger", "{out}{err}");
    let mut m = MaintenanceClient::connect(cluster.member(follower).endpoint.clone()).await.unwrap();
    let revision = m.status(StatusRequest {}).await.unwrap().into_inner().header.unwrap().revision;
    cluster.wait_for_equal_hashes(revision).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_members_form_a_cluster_with_peer_auto_tls() {
    let peers = (0..3).map(|_| format!("https://127.0.0.1:{}", free_port())).collect();
    let cluster = Cluster::start_on(Kind::Actcd, peers, &["--peer-auto-tls"]).await;
    cluster.leader().await;
    let (ok, out, err) = cluster.etcdctl(&["put", "auto", "tls"]);
    assert!(ok, "{out}{err}");
    let mut m = MaintenanceClient::connect(cluster.member(2).endpoint.clone()).await.unwrap();
    let revision = m.status(StatusRequest {}).await.unwrap().into_inner().header.unwrap().revision;
    cluster.wait_for_equal_hashes(revision).await;
}
