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

use anyhow::{bail, Result};
use sha1::{Digest, Sha1};

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
            bail!("couldn't find local name {:?} in the initial cluster configuration", flags.name);
        };
        let mut advertised: Vec<String> =
            flags.advertise_peer_urls.iter().map(|u| normalize(u)).collect::<Result<_>>()?;
        advertised.sort();
        if *own != advertised {
            bail!(
                "--initial-cluster has {}={} but missing from --initial-advertise-peer-urls={}",
                flags.name,
                own.join(","),
                advertised.join(",")
            );
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
            bail!("--initial-cluster: {pair:?} is not name=URL");
        };
        named.entry(name.to_string()).or_default().push(normalize(url)?);
    }
    if named.is_empty() {
        bail!("--initial-cluster: no member given");
    }
    for urls in named.values_mut() {
        urls.sort();
        urls.dedup();
    }
    Ok(named)
}

/// A peer URL as etcd keeps it: `http(s)://host:port`, no path.
fn normalize(url: &str) -> Result<String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("URL {url:?} has no scheme (http:// or https://)");
    };
    if !matches!(scheme, "http" | "https") {
        bail!("URL scheme must be http or https: {url:?}");
    }
    let host_port = rest.trim_end_matches('/');
    if host_port.contains('/') {
        bail!("URL must not contain a path: {url:?}");
    }
    if host_port.rsplit_once(':').is_none_or(|(_, port)| port.parse::<u16>().is_err()) {
        bail!("URL address does not have the form \"host:port\": {url:?}");
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

/// etcd's cluster id: SHA-1 of the member ids, sorted, each 8 bytes big-endian.
fn cluster_id(sorted_ids: &[u64]) -> u64 {
    let bytes: Vec<u8> = sorted_ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    first_word(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags<'a>(
        name: &'a str,
        initial_cluster: &'a str,
        advertise: &'a [String],
        token: &'a str,
    ) -> BootstrapFlags<'a> {
        BootstrapFlags { name, initial_cluster, advertise_peer_urls: advertise, token }
    }

    /// The ids etcd 3.4.23 reported on this machine (etcdctl member list -w json) for its
    /// defaults, and for `--name n1 --initial-cluster n1=http://127.0.0.1:23998
    /// --initial-advertise-peer-urls http://127.0.0.1:23998 --initial-cluster-token tok`.
    #[test]
    fn ids_are_the_ones_etcd_reports() {
        let default = [DEFAULT_ADVERTISE_PEER_URL.to_string()];
        let c = InitialCluster::from_flags(flags(
            DEFAULT_NAME,
            DEFAULT_INITIAL_CLUSTER,
            &default,
            DEFAULT_CLUSTER_TOKEN,
        ))
        .expect("etcd's defaults");
        assert_eq!((c.member_id, c.cluster_id), (0x8e9e05c52164694d, 0xcdf818194e3a8c32));
        assert_eq!((c.member_id, c.cluster_id), (10276657743932975437, 14841639068965178418));

        let peer = ["http://127.0.0.1:23998".to_string()];
        let c =
            InitialCluster::from_flags(flags("n1", "n1=http://127.0.0.1:23998", &peer, "tok")).expect("n1");
        assert_eq!((c.member_id, c.cluster_id), (4962766983165694201, 2008747148332546453));
        // A named member with the default --initial-cluster bootstraps alone on its own URLs.
        let alone =
            InitialCluster::from_flags(flags("n1", DEFAULT_INITIAL_CLUSTER, &peer, "tok")).expect("alone");
        assert_eq!(alone, c);
    }

    #[test]
    fn the_cluster_names_this_member_on_its_advertised_urls() {
        let peer = ["http://127.0.0.1:2380".to_string()];
        let err = InitialCluster::from_flags(flags("x", "a=http://127.0.0.1:2380", &peer, "t")).unwrap_err();
        assert_eq!(err.to_string(), "couldn't find local name \"x\" in the initial cluster configuration");
        let err = InitialCluster::from_flags(flags("a", "a=http://127.0.0.1:2381", &peer, "t")).unwrap_err();
        assert!(
            err.to_string().starts_with("--initial-cluster has a=http://127.0.0.1:2381 but missing"),
            "{err}"
        );
        for bad in ["a", "a=127.0.0.1:2380", "a=unix://x:1", "a=http://h:1/path", "a=http://h"] {
            assert!(InitialCluster::from_flags(flags("a", bad, &peer, "t")).is_err(), "{bad}");
        }

        // Three members: the ids do not depend on the order the flag lists them in, and a
        // member's URLs are sorted before hashing.
        let three = "a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://10.0.0.3:2380";
        let reordered = "c=http://10.0.0.3:2380,a=http://10.0.0.1:2380,b=http://10.0.0.2:2380";
        let a = ["http://10.0.0.1:2380".to_string()];
        let x = InitialCluster::from_flags(flags("a", three, &a, "t")).expect("three");
        let y = InitialCluster::from_flags(flags("a", reordered, &a, "t")).expect("reordered");
        assert_eq!(x, y);
        assert_eq!(x.members.len(), 3);
        assert_eq!(x.own().map(|m| m.name.as_str()), Some("a"));
        let both = ["http://b:2".to_string(), "http://a:1".to_string()];
        let m = InitialCluster::from_flags(flags("m", "m=http://b:2,m=http://a:1", &both, "t"))
            .expect("two urls");
        assert_eq!(
            m.own().map(|m| m.peer_urls.clone()),
            Some(vec!["http://a:1".to_string(), "http://b:2".to_string()])
        );
        assert_eq!(m.member_id, member_id(&["http://a:1".into(), "http://b:2".into()], "t"));
    }
}
