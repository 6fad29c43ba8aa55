//! The initial cluster, read from etcd's bootstrap flags as etcd reads them, and the member and
//! cluster ids derived from it exactly as etcd derives them, so that an actcd member started
//! with the flags of an etcd member reports the same ids (and etcd tooling that keys on them,
//! `etcdctl member list` and the apiserver's health checks, sees nothing new).
//!
//! etcd's worked example: with every flag at its default, `--initial-cluster` is
//! `default=http://localhost:2380` and `--initial-cluster-token` is `etcd-cluster`, so
//!
//! ```text
//! member id  = first 8 bytes, big-endian, of SHA-1("http://localhost:2380" + "etcd-cluster")
//!            = 8e9e05c52164694d
//! cluster id = first 8 bytes, big-endian, of SHA-1(8e9e05c52164694d as 8 big-endian bytes)
//!            = cdf818194e3a8c32
//! ```
//!
//! A member's peer URLs are sorted and concatenated before the token; the cluster hashes every
//! member id, sorted ascending, each as 8 big-endian bytes (etcd's `membership.NewMember` with
//! no time, and `RaftCluster.genID`).

use std::collections::BTreeMap;

use sha1::{Digest, Sha1};

/// Why the bootstrap flags, or a peer URL, are refused: etcd's words where etcd has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InitialClusterError {
    /// `--name` is not among `--initial-cluster`'s names.
    #[error("couldn't find local name {0:?} in the initial cluster configuration")]
    NameMissing(String),
    /// `--initial-cluster` lists this member on other URLs than it advertises.
    #[error(
        "--initial-cluster has {name}={listed} but missing from --initial-advertise-peer-urls={advertised}"
    )]
    NotAdvertised {
        /// `--name`.
        name: String,
        /// Its URLs in `--initial-cluster`.
        listed: String,
        /// `--initial-advertise-peer-urls`.
        advertised: String,
    },
    /// A member of `--initial-cluster` that is not `name=URL`.
    #[error("--initial-cluster: {0:?} is not name=URL")]
    NotNameUrl(String),
    /// `--initial-cluster` is empty.
    #[error("--initial-cluster: no member given")]
    NoMember,
    /// A URL without `scheme://`.
    #[error("URL {0:?} has no scheme (http:// or https://)")]
    NoScheme(String),
    /// A URL of another scheme than http or https.
    #[error("URL scheme must be http or https: {0:?}")]
    Scheme(String),
    /// A URL with a path.
    #[error("URL must not contain a path: {0:?}")]
    Path(String),
    /// A URL whose address is not `host:port`.
    #[error("URL address does not have the form \"host:port\": {0:?}")]
    HostPort(String),
}

type Result<T> = std::result::Result<T, InitialClusterError>;

/// etcd's default `--initial-cluster`.
pub const DEFAULT_INITIAL_CLUSTER: &str = "default=http://localhost:2380";
/// etcd's default `--initial-advertise-peer-urls`.
pub const DEFAULT_ADVERTISE_PEER_URL: &str = "http://localhost:2380";
/// etcd's default `--initial-cluster-token`.
pub const DEFAULT_CLUSTER_TOKEN: &str = "etcd-cluster";
/// etcd's default `--name`.
pub const DEFAULT_NAME: &str = "default";

/// One member of the initial cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `--name` of the member.
    pub name: String,
    /// Its peer URLs, sorted.
    pub peer_urls: Vec<String>,
    /// Its id, derived from the peer URLs and the cluster token.
    pub id: u64,
}

/// The cluster this member bootstraps into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialCluster {
    /// Every member, sorted by id.
    pub members: Vec<Member>,
    /// The cluster id, derived from the member ids.
    pub cluster_id: u64,
    /// This member's id.
    pub member_id: u64,
}

/// The bootstrap flags, as given.
#[derive(Debug, Clone, Copy)]
pub struct BootstrapFlags<'a> {
    /// `--name`.
    pub name: &'a str,
    /// `--initial-cluster`.
    pub initial_cluster: &'a str,
    /// `--initial-advertise-peer-urls`.
    pub advertise_peer_urls: &'a [String],
    /// `--initial-cluster-token`.
    pub token: &'a str,
}

impl InitialCluster {
    /// Reads the flags as etcd does: a member named other than `default` with the default
    /// `--initial-cluster` bootstraps alone on its advertised peer URLs; otherwise
    /// `--initial-cluster` must name this member, on exactly its advertised peer URLs.
    pub fn from_flags(flags: BootstrapFlags<'_>) -> Result<Self> {
        let adopted;
        let text = if flags.name != DEFAULT_NAME && flags.initial_cluster == DEFAULT_INITIAL_CLUSTER {
            adopted =
                flags.advertise_peer_urls.iter().map(|u| format!("{}={u}", flags.name)).collect::<Vec<_>>();
            adopted.join(",")
        } else {
            flags.initial_cluster.to_string()
        };
        let named = parse(&text)?;
        let Some(own) = named.get(flags.name) else {
            return Err(InitialClusterError::NameMissing(flags.name.to_string()));
        };
        let mut advertised: Vec<String> =
            flags.advertise_peer_urls.iter().map(|u| normalize(u)).collect::<Result<_>>()?;
        advertised.sort();
        if *own != advertised {
            return Err(InitialClusterError::NotAdvertised {
                name: flags.name.to_string(),
                listed: own.join(","),
                advertised: advertised.join(","),
            });
        }
        let mut members: Vec<Member> = named
            .into_iter()
            .map(|(name, peer_urls)| {
                let id = member_id(&peer_urls, flags.token);
                Member { name, peer_urls, id }
            })
            .collect();
        members.sort_by_key(|m| m.id);
        let ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        Ok(Self { cluster_id: cluster_id(&ids), member_id: member_id(&advertised, flags.token), members })
    }

    /// This member.
    pub fn own(&self) -> Option<&Member> {
        self.members.iter().find(|m| m.id == self.member_id)
    }
}

/// `name=url,name=url,...`, a name given more than once collecting each URL (etcd's URLsMap);
/// each member's URLs sorted.
fn parse(text: &str) -> Result<BTreeMap<String, Vec<String>>> {
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, url)) = pair.split_once('=') else {
            return Err(InitialClusterError::NotNameUrl(pair.to_string()));
        };
        named.entry(name.to_string()).or_default().push(normalize(url)?);
    }
    if named.is_empty() {
        return Err(InitialClusterError::NoMember);
    }
    for urls in named.values_mut() {
        urls.sort();
        urls.dedup();
    }
    Ok(named)
}

/// A peer URL as etcd keeps it: `http(s)://host:port`, no path.
pub fn normalize(url: &str) -> Result<String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(InitialClusterError::NoScheme(url.to_string()));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(InitialClusterError::Scheme(url.to_string()));
    }
    let host_port = rest.trim_end_matches('/');
    if host_port.contains('/') {
        return Err(InitialClusterError::Path(url.to_string()));
    }
    if host_port.rsplit_once(':').is_none_or(|(_, port)| port.parse::<u16>().is_err()) {
        return Err(InitialClusterError::HostPort(url.to_string()));
    }
    Ok(format!("{scheme}://{host_port}"))
}

fn first_word(bytes: &[u8]) -> u64 {
    let digest = Sha1::digest(bytes);
    let mut word = [0u8; 8];
    word.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(word)
}

/// etcd's member id: SHA-1 of the sorted peer URLs, then the cluster token.
fn member_id(sorted_peer_urls: &[String], token: &str) -> u64 {
    let mut bytes = sorted_peer_urls.concat().into_bytes();
    bytes.extend_from_slice(token.as_bytes());
    first_word(&bytes)
}

/// The id etcd gives a member added by MemberAdd: its sorted peer URLs, the cluster token and
/// the time in Unix seconds (etcd's `NewMember` with a time), so that a member added again on
/// the same URLs gets a new id.
pub fn added_member_id(peer_urls: &[String], token: &str, unix_secs: u64) -> u64 {
    let mut sorted = peer_urls.to_vec();
    sorted.sort();
    member_id(&sorted, &format!("{token}{unix_secs}"))
}

/// etcd's cluster id: SHA-1 of the member ids, sorted, each 8 bytes big-endian.
fn cluster_id(sorted_ids: &[u64]) -> u64 {
    let bytes: Vec<u8> = sorted_ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    first_word(&bytes)
}
