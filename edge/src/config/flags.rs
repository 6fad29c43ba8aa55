//! The server's flags, named as etcd names them and with etcd's defaults, and the
//! two parsers their values need: `http://host:port` URLs to socket addresses, and durations as
//! etcd's flags take them (Go's, read by `actcd_proto::go_duration`). The tunable etcd has no
//! flag for (serving threads) defaults to the machine's cores; the mailbox
//! capacities are here too, without flags.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use actcd_actors::mailboxes::Mailboxes;
use actcd_proto::go_duration;
use actcd_store::auto_compaction::{self, AutoCompaction};
use clap::builder::RangedU64ValueParser;
use clap::Parser;

use crate::config::go_bool::GoBool;
use crate::config::tls_group::{ClientTls, PeerTls};
use crate::cors::parse_origin;
use crate::tls::cert_names::{AllowedName, AllowedNameError};
use crate::tls::TlsFlags;
use crate::SERVER_VERSION;

/// etcd's default `--max-request-bytes`: 1.5 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// etcd's default `--quota-backend-bytes` (used when the flag is 0): 2 GiB.
pub const DEFAULT_QUOTA_BYTES: u64 = 2 << 30;
/// The default `--read-budget-bytes`: one 200k × 1 KiB list (204 MB) fits, with room for the
/// next to start.
pub const DEFAULT_READ_BUDGET_BYTES: usize = 256 << 20;

/// A flag's value that parsed but cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// A listen URL that is not http:// or https://.
    #[error("--{flag}: {url:?} is not an http:// or https:// URL (unix sockets are not supported)")]
    NotHttp {
        /// The flag, without its dashes.
        flag: String,
        /// The URL.
        url: String,
    },
    /// A listen URL whose host does not resolve.
    #[error("--{flag}: cannot resolve {url:?}")]
    Unresolved {
        /// The flag, without its dashes.
        flag: String,
        /// The URL.
        url: String,
        /// What the resolver said.
        #[source]
        error: std::io::Error,
    },
    /// A listen URL whose host resolves to nothing.
    #[error("--{flag}: {url:?} resolves to no address")]
    NoAddress {
        /// The flag, without its dashes.
        flag: String,
        /// The URL.
        url: String,
    },
    /// A listen-URL flag with no URL.
    #[error("--{flag}: no URL given")]
    NoUrl {
        /// The flag, without its dashes.
        flag: String,
    },
    /// etcd's rule between the two Raft timing flags, in its words.
    #[error("--election-timeout[{election_ms}ms] should be at least as 5 times as --heartbeat-interval[{heartbeat_ms}ms]")]
    ElectionTimeout {
        /// `--election-timeout`.
        election_ms: u64,
        /// `--heartbeat-interval`.
        heartbeat_ms: u64,
    },
}

/// actcd: a key-value server that speaks the etcd v3 gRPC API.
#[derive(Debug, Clone, Parser)]
#[command(name = "actcd", version, long_version = version_text(), about)]
pub struct Config {
    /// Path to the server configuration file (etcd's YAML). With one, flags and ETCD_*
    /// variables are ignored, as etcd ignores them.
    #[arg(long = "config-file")]
    pub config_file: Option<PathBuf>,

    /// Human-readable name for this member.
    #[arg(long, default_value = "default")]
    pub name: String,

    /// Path to the data directory.
    #[arg(long = "data-dir", default_value = "default.actcd")]
    pub data_dir: PathBuf,

    /// URLs to listen on for client traffic (comma-separated).
    #[arg(long = "listen-client-urls", default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    pub listen_client_urls: Vec<String>,

    /// This member's client URLs to advertise to the rest of the cluster.
    #[arg(long = "advertise-client-urls", default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    pub advertise_client_urls: Vec<String>,

    /// Initial cluster configuration for bootstrapping (name=peer-URL pairs, comma-separated).
    #[arg(long = "initial-cluster", default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,

    /// Reject reconfiguration requests that would cause quorum loss.
    #[arg(long = "strict-reconfig-check", go_bool = true)]
    pub strict_reconfig_check: bool,

    /// The maximum number of learners in the cluster (etcd 3.6's flag; etcd 3.4 allows one).
    #[arg(long = "max-learners", default_value_t = 1)]
    pub max_learners: usize,

    /// Check data corruption before serving any client/peer traffic.
    #[arg(long = "experimental-initial-corrupt-check", go_bool = false)]
    pub initial_corrupt_check: bool,

    /// Duration of time between cluster corruption check passes (0s: off).
    #[arg(long = "experimental-corrupt-check-time", default_value = "0s", value_parser = parse_duration_or_off)]
    pub corrupt_check_time: Duration,

    /// Interpret 'auto-compaction-retention' one of: periodic|revision.
    #[arg(long = "auto-compaction-mode", default_value = "periodic")]
    pub auto_compaction_mode: String,

    /// Auto compaction retention for mvcc key value store: hours or a Go duration (periodic),
    /// a revision count (revision). 0 means disable auto compaction.
    #[arg(long = "auto-compaction-retention", default_value = "0")]
    pub auto_compaction_retention: String,

    /// Initial cluster state: new (bootstrap) or existing (join a running cluster).
    #[arg(long = "initial-cluster-state", default_value = "new", value_parser = ["new", "existing"])]
    pub initial_cluster_state: String,

    /// Initial cluster token for the cluster during bootstrap: part of every member id.
    #[arg(long = "initial-cluster-token", default_value = "etcd-cluster")]
    pub initial_cluster_token: String,

    /// This member's peer URLs to advertise to the rest of the cluster (comma-separated).
    #[arg(
        long = "initial-advertise-peer-urls",
        default_value = "http://localhost:2380",
        value_delimiter = ','
    )]
    pub initial_advertise_peer_urls: Vec<String>,

    /// URLs to listen on for peer traffic (comma-separated).
    #[arg(long = "listen-peer-urls", default_value = "http://localhost:2380", value_delimiter = ',')]
    pub listen_peer_urls: Vec<String>,

    /// URLs to serve /metrics, /health and /version on (comma-separated).
    #[arg(long = "listen-metrics-urls", default_value = "http://127.0.0.1:2381", value_delimiter = ',')]
    pub listen_metrics_urls: Vec<String>,

    /// Comma-separated white list of origins for CORS, or cross-origin resource sharing, (empty or * means allow all).
    #[arg(long = "cors", default_value = "*", value_delimiter = ',', value_parser = parse_origin)]
    pub cors: Vec<String>,

    /// Maximum number of operations permitted in a transaction (per nesting level).
    #[arg(long = "max-txn-ops", default_value_t = 128)]
    pub max_txn_ops: usize,

    /// Maximum client request size in bytes the server will accept.
    #[arg(long = "max-request-bytes", default_value_t = DEFAULT_MAX_REQUEST_BYTES)]
    pub max_request_bytes: usize,

    /// Raise alarms when backend size exceeds the given quota (0 defaults to 2 GiB).
    #[arg(long = "quota-backend-bytes", default_value_t = 0)]
    pub quota_backend_bytes: u64,

    /// Specify auth token type and its options: 'simple' or 'jwt,pub-key=...,priv-key=...,sign-method=...[,ttl=...]'.
    #[arg(long = "auth-token", default_value = "simple")]
    pub auth_token: String,

    /// The lifetime in seconds of a simple auth token since its last use.
    #[arg(long = "auth-token-ttl", default_value_t = 300, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    pub auth_token_ttl: u64,

    /// bcrypt's cost for hashing authentication passwords (4 to 31).
    #[arg(long = "bcrypt-cost", default_value_t = 10, value_parser = RangedU64ValueParser::<u32>::new().range(4..=31))]
    pub bcrypt_cost: u32,

    /// Duration of periodic watch progress notifications (e.g. 10m, 30s, 500ms).
    #[arg(long = "experimental-watch-progress-notify-interval", default_value = "10m", value_parser = parse_duration)]
    pub watch_progress_notify_interval: Duration,

    /// Log level: debug, info, warn, error, panic or fatal.
    #[arg(long = "log-level", default_value = "info", value_parser = ["debug", "info", "warn", "error", "panic", "fatal"])]
    pub log_level: String,

    /// Maximum writes committed by one fsync (0 defaults to 10000, as etcd).
    #[arg(long = "backend-batch-limit", default_value_t = 0)]
    pub backend_batch_limit: usize,

    /// Time (in milliseconds) of a heartbeat interval.
    #[arg(long = "heartbeat-interval", default_value_t = 100, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    pub heartbeat_interval: u64,

    /// Time (in milliseconds) for an election to timeout.
    #[arg(long = "election-timeout", default_value_t = 1000, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    pub election_timeout: u64,

    /// Number of committed transactions to trigger a snapshot to disk.
    #[arg(long = "snapshot-count", default_value_t = 100_000, value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
    pub snapshot_count: u64,

    /// Bytes the answers of all large reads (Range, read-only Txn, the JSON gateway) may hold
    /// together while they are built and sent; reads over it wait their turn (actcd's own).
    #[arg(long = "read-budget-bytes", default_value_t = DEFAULT_READ_BUDGET_BYTES, value_parser = RangedU64ValueParser::<usize>::new().range(1 << 20..=u32::MAX as u64))]
    pub read_budget_bytes: usize,

    /// Serving threads: each serves the client connections handed to it, their streams, and
    /// the watch shard of their watchers (default: one per core). `--watch-shards` and
    /// `--stream-threads`, the two thread counts it replaced, still set it.
    #[arg(long = "serving-threads", aliases = ["watch-shards", "stream-threads"], default_value_t = cores(), value_parser = RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub serving_threads: usize,

    /// The client URLs' TLS: --cert-file, --key-file, --trusted-ca-file, --client-cert-auth,
    /// --client-crl-file, --auto-tls.
    #[command(flatten)]
    pub client_tls: ClientTls,

    /// Comma-separated list of supported TLS cipher suites between client/server and peers (empty will be auto-populated by the TLS library).
    #[arg(long = "cipher-suites", value_delimiter = ',')]
    pub cipher_suites: Vec<String>,

    /// Minimum TLS version supported by etcd: TLS1.2 or TLS1.3.
    #[arg(long = "tls-min-version")]
    pub tls_min_version: Option<String>,

    /// Maximum TLS version supported by etcd: TLS1.2 or TLS1.3.
    #[arg(long = "tls-max-version")]
    pub tls_max_version: Option<String>,

    /// The peer URLs' TLS: the client URLs' flags with `peer-` before each name.
    #[command(flatten)]
    pub peer_tls: PeerTls,

    /// Allowed CN for inter peer authentication.
    #[arg(long = "peer-cert-allowed-cn")]
    pub peer_cert_allowed_cn: Option<String>,

    /// Allowed TLS hostname for inter peer authentication.
    #[arg(long = "peer-cert-allowed-hostname")]
    pub peer_cert_allowed_hostname: Option<String>,

    /// Mailbox capacities of the long-lived actors (no flags: see [`Mailboxes`]).
    #[arg(skip)]
    pub mailboxes: Mailboxes,
}

/// What `--version` prints after "actcd ", in etcd's form: the server's version, the etcd API
/// version it reports, how it was built.
fn version_text() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "Version: {}\netcd API Version: {SERVER_VERSION}\nGit SHA: {}\nRust Version: {}\nOS/Arch: {}/{}",
            env!("CARGO_PKG_VERSION"),
            option_env!("ACTCD_GIT_SHA").unwrap_or("Not provided (set ACTCD_GIT_SHA when building)"),
            env!("ACTCD_RUSTC_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
        )
    });
    TEXT.as_str()
}

/// The machine's cores, as the process may use them.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Config {
    /// The effective backend quota.
    pub fn quota_bytes(&self) -> u64 {
        if self.quota_backend_bytes == 0 {
            DEFAULT_QUOTA_BYTES
        } else {
            self.quota_backend_bytes
        }
    }

    /// The client URLs' TLS flags.
    pub fn tls_flags(&self) -> TlsFlags {
        self.client_tls.flags(self.shared_tls())
    }

    /// The peer URLs' TLS flags. As on etcd, `--peer-auto-tls` without certificate files
    /// replaces the whole set: client certificates, the CA, the CRL and the allowed name go
    /// (self-signed members could not verify one another), and given files win over it.
    pub fn peer_tls_flags(&self) -> Result<TlsFlags, AllowedNameError> {
        let peer = &self.peer_tls;
        let files = peer.cert_file.is_some() || peer.key_file.is_some();
        if peer.auto_tls && files {
            tracing::warn!("ignoring peer auto TLS since certs given");
        }
        if peer.auto_tls && !files {
            return Ok(TlsFlags { names: PeerTls::names(), auto_tls: true, ..self.shared_tls() });
        }
        let shared = TlsFlags {
            allowed_name: AllowedName::from_flags(
                self.peer_cert_allowed_cn.as_deref(),
                self.peer_cert_allowed_hostname.as_deref(),
            )?,
            ..self.shared_tls()
        };
        Ok(TlsFlags { auto_tls: false, ..peer.flags(shared) })
    }

    /// What the client and the peer URLs share: etcd's cipher suites and versions are one
    /// set of flags for both.
    fn shared_tls(&self) -> TlsFlags {
        TlsFlags {
            cipher_suites: self.cipher_suites.clone(),
            min_version: self.tls_min_version.clone(),
            max_version: self.tls_max_version.clone(),
            ..TlsFlags::default()
        }
    }

    /// The auto-compaction flags, read as etcd 3.4 reads them.
    pub fn auto_compaction(&self) -> Result<AutoCompaction, auto_compaction::Invalid> {
        let parse = |text: &str| go_duration::parse(text).map_err(|err| err.to_string());
        AutoCompaction::from_flags(&self.auto_compaction_mode, &self.auto_compaction_retention, parse)
    }

    /// The Raft timing flags, checked as etcd checks them.
    pub fn check_raft_timing(&self) -> Result<(), FlagError> {
        if self.election_timeout < 5 * self.heartbeat_interval {
            return Err(FlagError::ElectionTimeout {
                election_ms: self.election_timeout,
                heartbeat_ms: self.heartbeat_interval,
            });
        }
        Ok(())
    }

    /// `--backend-batch-limit`, or `None` at 0 for the Proposer's own default (etcd's 10000).
    pub fn batch_limit(&self) -> Option<usize> {
        (self.backend_batch_limit != 0).then_some(self.backend_batch_limit)
    }
}

/// openraft's modules whose errors are kept below `--log-level debug`: its state-machine
/// worker, storage callbacks, inflight bookkeeping and engine, none of which log on a healthy
/// cluster or when a peer is down.
const OPENRAFT_ERRORS: &str =
    "openraft::core::sm=error,openraft::storage=error,openraft::progress=error,openraft::engine=error";

/// The tracing filter for `--log-level` (etcd's panic and fatal log only errors).
/// openraft logs every failed heartbeat to a member that is down (warnings and errors,
/// twice a second, from its replication and core modules): below `debug` those are
/// silent, and actcd logs what an operator acts on instead, once per change (a leader
/// elected or lost, a peer unreachable or back). openraft's errors from the modules that
/// are quiet on a healthy cluster stay: a state-machine worker or a log flush that failed
/// (the core then waits for ever, and nothing else would say why).
///
/// rustls warns of what a TLS peer sent, once per connection: an IP address as server name
/// (Node's grpc-js sends one on every connection), a duplicate or malformed one, a warning
/// alert, an unexpected message. Any client can cause these and no operator can act on them,
/// so below `debug` they are silent; a handshake that fails is refused and logged by actcd.
pub fn tracing_filter(log_level: &str) -> String {
    let level = match log_level {
        "debug" => return "debug".into(),
        "info" => "info",
        "warn" => "warn",
        _ => "error",
    };
    format!("{level},openraft=off,{OPENRAFT_ERRORS},rustls=error")
}

/// Resolves `http://host:port` and `https://host:port` URLs (client and metrics URLs) to socket
/// addresses, each with whether it serves TLS.
pub fn listen_urls(urls: &[String], flag: &str) -> Result<Vec<(SocketAddr, bool)>, FlagError> {
    let mut addrs = Vec::new();
    for url in urls {
        let (flag, url) = (flag.to_owned(), url.clone());
        let (host_port, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(FlagError::NotHttp { flag, url }),
        };
        let found = match host_port.trim_end_matches('/').to_socket_addrs() {
            Ok(mut found) => found.next(),
            Err(error) => return Err(FlagError::Unresolved { flag, url, error }),
        };
        let Some(addr) = found else { return Err(FlagError::NoAddress { flag, url }) };
        addrs.push((addr, tls));
    }
    if addrs.is_empty() {
        return Err(FlagError::NoUrl { flag: flag.to_owned() });
    }
    Ok(addrs)
}

/// A flag error's first line without clap's "error: ": the line that names the flag and the
/// value (the rest is usage, which `--help` gives).
pub fn error_line(err: &clap::Error) -> String {
    let text = err.to_string();
    text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_owned()
}

/// A Go duration where zero means off (`--experimental-corrupt-check-time`).
pub fn parse_duration_or_off(text: &str) -> Result<Duration, String> {
    go_duration::parse(text).map_err(|err| err.to_string())
}

/// Parses a duration flag as etcd's flags take them (Go's `time.ParseDuration`: `10m`,
/// `1m30s`, `500ms`); the flags that take one mean nothing at zero, but for the one that
/// [`parse_duration_or_off`] reads.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match go_duration::parse(text) {
        Ok(d) if d.is_zero() => Err(format!("duration {text:?} must be positive")),
        Ok(d) => Ok(d),
        Err(err) => Err(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use actcd_store::auto_compaction::AutoCompaction;
    use clap::Parser;

    use super::{listen_urls, parse_duration, tracing_filter, Config, DEFAULT_QUOTA_BYTES};
    use crate::tls::cert_names::AllowedName;
    use crate::tls::{CLIENT_FLAGS, PEER_FLAGS};

    #[test]
    fn flag_defaults_match_etcd() {
        let c = Config::parse_from(["actcd"]);
        assert_eq!((c.max_txn_ops, c.max_request_bytes, c.quota_bytes()), (128, 1_572_864, 2 << 30));
        assert_eq!(c.data_dir, std::path::PathBuf::from("default.actcd"));
        assert_eq!(c.listen_client_urls, ["http://127.0.0.1:2379"]);
        assert_eq!(c.batch_limit(), None, "0: the Proposer's default, etcd's defaultBatchLimit");
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(c.serving_threads, cores, "the serving threads default to the machine's cores");
        let tuned = Config::parse_from(["actcd", "--serving-threads", "3", "--backend-batch-limit", "64"]);
        assert_eq!((tuned.serving_threads, tuned.batch_limit()), (3, Some(64)));
        let old = Config::parse_from(["actcd", "--stream-threads", "2"]);
        assert_eq!(old.serving_threads, 2, "the flags it replaced still set it");
        assert!(
            Config::try_parse_from(["actcd", "--serving-threads", "0"]).is_err(),
            "a server needs a thread"
        );
    }

    #[test]
    fn listen_urls_resolve_and_refuse_in_one_line_each() {
        let urls = |list: &[&str]| listen_urls(&list.iter().map(|u| u.to_string()).collect::<Vec<_>>(), "x");
        let both = urls(&["https://127.0.0.1:2379", "http://127.0.0.1:2380/"]).unwrap();
        assert_eq!(
            both,
            [("127.0.0.1:2379".parse().unwrap(), true), ("127.0.0.1:2380".parse().unwrap(), false)]
        );
        assert_eq!(urls(&["http://localhost:0", "http://127.0.0.1:1"]).unwrap().len(), 2);
        let refused = |list: &[&str]| urls(list).unwrap_err().to_string();
        assert_eq!(
            refused(&["127.0.0.1:2379"]),
            r#"--x: "127.0.0.1:2379" is not an http:// or https:// URL (unix sockets are not supported)"#
        );
        assert!(refused(&["unix:///tmp/s"]).contains("unix sockets are not supported"));
        assert_eq!(refused(&[]), "--x: no URL given");
        let portless = urls(&["http://127.0.0.1"]).unwrap_err();
        assert_eq!(portless.to_string(), r#"--x: cannot resolve "http://127.0.0.1""#);
        assert!(std::error::Error::source(&portless).is_some(), "the resolver's words follow in the chain");
    }

    /// etcd's rule, in its words: the election timeout is at least five heartbeats.
    #[test]
    fn the_election_timeout_must_be_five_heartbeats() {
        let timing = |heartbeat: &str, election: &str| {
            Config::parse_from(["actcd", "--heartbeat-interval", heartbeat, "--election-timeout", election])
                .check_raft_timing()
                .map_err(|e| e.to_string())
        };
        assert_eq!(timing("100", "500"), Ok(()));
        assert_eq!(
            timing("100", "499"),
            Err("--election-timeout[499ms] should be at least as 5 times as --heartbeat-interval[100ms]"
                .into())
        );
        assert!(Config::try_parse_from(["actcd", "--heartbeat-interval", "0"]).is_err(), "not 0 ms");
    }

    #[test]
    fn durations_read_as_go_reads_them_and_zero_is_off_only_where_it_may_be() {
        let c = Config::parse_from(["actcd", "--experimental-watch-progress-notify-interval", "1m30s"]);
        assert_eq!(c.watch_progress_notify_interval, Duration::from_secs(90));
        assert_eq!(Config::parse_from(["actcd"]).watch_progress_notify_interval, Duration::from_secs(600));
        assert_eq!(parse_duration("0s"), Err(r#"duration "0s" must be positive"#.into()));
        assert!(parse_duration("90").is_err(), "Go wants a unit");
        let off = Config::parse_from(["actcd", "--experimental-corrupt-check-time", "0s"]);
        assert_eq!(off.corrupt_check_time, Duration::ZERO);
        let quota = Config::parse_from(["actcd", "--quota-backend-bytes", "1024"]);
        assert_eq!(
            (quota.quota_bytes(), Config::parse_from(["actcd"]).quota_bytes()),
            (1024, DEFAULT_QUOTA_BYTES)
        );
    }

    #[test]
    fn auto_compaction_is_read_from_its_two_flags() {
        let read = |args: &[&str]| {
            Config::parse_from(std::iter::once("actcd").chain(args.iter().copied()))
                .auto_compaction()
                .map_err(|e| e.to_string())
        };
        assert_eq!(read(&[]), Ok(AutoCompaction::Off));
        assert_eq!(
            read(&["--auto-compaction-retention", "2"]),
            Ok(AutoCompaction::Periodic(Duration::from_secs(7200)))
        );
        assert_eq!(
            read(&["--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000"]),
            Ok(AutoCompaction::Revision(1000))
        );
        assert_eq!(
            read(&["--auto-compaction-mode", "daily", "--auto-compaction-retention", "1"]),
            Err(r#"unknown auto-compaction-mode "daily""#.into())
        );
    }

    /// The client and peer sets share the cipher suites and versions; --peer-auto-tls without
    /// files replaces the peer set whole, as on etcd, and files win over it.
    #[test]
    fn the_tls_sets_share_what_etcd_shares_and_peer_auto_tls_replaces_the_rest() {
        let c = Config::parse_from([
            "actcd",
            "--cert-file=c.pem",
            "--key-file=c-key.pem",
            "--peer-trusted-ca-file=ca.pem",
            "--peer-client-cert-auth",
            "--peer-auto-tls",
            "--peer-cert-allowed-cn=member",
            "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "--tls-min-version=TLS1.2",
        ]);
        let client = c.tls_flags();
        assert_eq!(client.names, &CLIENT_FLAGS);
        assert_eq!(client.cert_file.as_deref(), Some(Path::new("c.pem")));
        assert!(client.allowed_name.is_none() && !client.client_cert_auth);
        let peer = c.peer_tls_flags().unwrap();
        assert_eq!(peer.names, &PEER_FLAGS);
        assert!(peer.auto_tls && !peer.client_cert_auth && peer.trusted_ca_file.is_none());
        assert!(peer.allowed_name.is_none(), "self-signed members could not check a CN");
        for set in [&client, &peer] {
            assert_eq!(set.cipher_suites, ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
            assert_eq!(set.min_version.as_deref(), Some("TLS1.2"));
        }

        let with_files = Config::parse_from([
            "actcd",
            "--peer-cert-file=p.pem",
            "--peer-key-file=p-key.pem",
            "--peer-trusted-ca-file=ca.pem",
            "--peer-auto-tls",
            "--peer-cert-allowed-cn=member",
        ]);
        let peer = with_files.peer_tls_flags().unwrap();
        assert!(!peer.auto_tls, "files win over auto TLS");
        assert_eq!(peer.trusted_ca_file.as_deref(), Some(Path::new("ca.pem")));
        assert_eq!(peer.allowed_name, Some(AllowedName::CommonName("member".into())));
        assert!(with_files.tls_flags().cert_file.is_none(), "peer files are not the client's");

        let both =
            Config::parse_from(["actcd", "--peer-cert-allowed-cn=a", "--peer-cert-allowed-hostname=b"]);
        assert_eq!(
            both.peer_tls_flags().unwrap_err().to_string(),
            r#"AllowedCN and AllowedHostname are mutually exclusive (cn="a", hostname="b")"#
        );
    }

    /// What a subscriber wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(log_level: &str) -> String {
        let written = Written::default();
        let sink = written.clone();
        let filter = tracing_subscriber::EnvFilter::try_new(tracing_filter(log_level)).unwrap();
        let subscriber =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(move || sink.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "openraft::replication", "replication to a down peer failed");
            tracing::error!(target: "openraft::core::raft_core", "timeout while requesting vote");
            tracing::error!(target: "openraft::core::sm::worker", "the state machine failed");
            tracing::error!(target: "openraft::storage::callback", "LogFlush error");
            tracing::info!(target: "actcd_raft::cluster::start", "leader elected");
        });
        let written = written.0.lock().unwrap().clone();
        String::from_utf8(written).unwrap()
    }

    #[test]
    fn openraft_keeps_its_quiet_modules_errors_and_drops_the_peer_noise() {
        let info = logged("info");
        assert!(info.contains("the state machine failed") && info.contains("LogFlush error"), "{info}");
        assert!(!info.contains("down peer") && !info.contains("requesting vote"), "{info}");
        assert!(info.contains("leader elected"), "{info}");
        let error = logged("error");
        assert!(error.contains("the state machine failed") && !error.contains("leader elected"), "{error}");
        assert!(logged("debug").contains("down peer"));
    }
}
