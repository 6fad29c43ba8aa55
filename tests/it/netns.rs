//! Members on hosts of their own, so that the network between them can fail as a real one does:
//! each host is an `ip netns` namespace with two links. Its peer link is a veth into a bridge
//! that every host shares (and the test's side holds an address on), and carries Raft; its
//! client link is a veth straight to the test's side, and carries the test's calls. A fault
//! acts on the peer link alone, so a partitioned member is cut off from its peers and still
//! reachable by the test, which can then ask it what a client on its side of the cut would
//! get (a stale read, say). Nothing routes between the two links: forwarding is off on the
//! test's side and a namespace has no default route, so a member cannot reach a peer through
//! the test's side.
//!
//! The kernel here has no netem (nor red, choke, sfq, fq_codel, police or gact): of the
//! qdiscs only htb, tbf and the fifos, of the classifiers u32 and bpf. A slow, lossy link is
//! therefore built from what is there: an htb class at a low rate with a short pfifo (packets
//! wait behind the rate, so delay grows and varies with what else is queued: jitter, and a
//! full queue drops: tail drops under load), and a classic-BPF filter that sends a random share
//! of packets (`ld rand`, the kernel's prandom) to a class whose pfifo holds nothing, so that
//! share is dropped whatever the load, as netem's `loss` would. Both directions are shaped
//! (the test's side of the veth and the namespace's). TCP makes the rest of the jitter: a lost
//! segment waits for a retransmission, 200 ms or more.
//!
//! Setting up needs root (CAP_NET_ADMIN) and `ip`/`tc`; every name carries this process's id
//! and a counter, so tests run one after another (or side by side) never share a namespace,
//! and Drop removes the namespaces (their veths go with them) and the bridge, also on a
//! panic. Namespaces left by a process that died (SIGKILL) are removed by the next one.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use actcd_test_support::server::Kind;

use crate::cluster::{Cluster, Placement};

/// Where namespaces' names start: with this process's id after it, a stale one is recognised.
const PREFIX: &str = "actcd-net-";

/// The port every member's peer URL takes on its own host (a namespace has every port free).
pub const PEER_PORT: u16 = 2380;

/// The port every member's client URL takes on its own host: a client finds a restarted
/// member where it was.
pub const CLIENT_PORT: u16 = 2379;

/// One network set-up at a time in this process: picking a free subnet and taking it is not
/// atomic otherwise.
static SETUP: Mutex<()> = Mutex::new(());

/// How a link is slowed: see the module doc.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The rate packets leave at, each way, in kbit/s.
    pub rate_kbit: u32,
    /// Packets that may wait behind the rate; more are dropped.
    pub queue: u32,
    /// The share of packets dropped at random, in percent.
    pub loss_percent: u32,
}

/// One host: a namespace and its two links.
pub struct Host {
    pub ns: String,
    /// Its address on the bridge (peer URLs).
    pub peer_ip: Ipv4Addr,
    /// Its address on its client link (client URLs).
    pub client_ip: Ipv4Addr,
    /// The test's side of the peer link (a port of the bridge).
    peer_link: String,
}

/// Hosts on a bridge, removed on drop.
pub struct Net {
    bridge: String,
    pub hosts: Vec<Host>,
}

/// Runs `ip`/`tc` with `args`: its stderr on failure.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn must(program: &str, args: &[&str]) {
    run(program, args).unwrap_or_else(|e| panic!("network set-up: {e}"));
}

/// `tc` with `args`, in namespace `ns` or (None) on the test's side.
fn tc(ns: Option<&str>, args: &[&str]) -> Result<(), String> {
    match ns {
        Some(ns) => run("ip", &[&["netns", "exec", ns, "tc"], args].concat()),
        None => run("tc", args),
    }
}

/// Removes namespaces and bridges left by processes of ours that are gone.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let mut parts = rest.split('-');
        let (Some(pid), Some(set)) = (parts.next(), parts.next()) else { continue };
        let Ok(pid) = u32::from_str_radix(pid, 16) else { continue };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = run("ip", &["netns", "del", name]);
        let _ = run("ip", &["link", "del", &format!("ab{pid:x}-{set}")]);
    }
}

/// A /24 under 10.77 (peer links) whose twin under 10.78 (client links) no interface uses.
fn free_subnet() -> u8 {
    let out = Command::new("ip").args(["-o", "-4", "addr", "show"]).output().expect("ip runs");
    let taken = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = std::process::id() % 250;
    (0..250)
        .map(|k| ((start + k) % 250) as u8)
        .find(|s| !taken.contains(&format!("10.77.{s}.")) && !taken.contains(&format!("10.78.{s}.")))
        .expect("a free 10.77.x.0/24")
}

impl Net {
    /// `n` hosts on a new bridge.
    pub fn new(n: usize) -> Net {
        assert!(n <= 60, "at most 60 hosts (four client-link addresses each in one /24)");
        static SETS: AtomicU32 = AtomicU32::new(0);
        let _one = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        remove_stale();
        let pid = std::process::id();
        let set = SETS.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{pid:x}-{set:x}");
        let subnet = free_subnet();
        let mut net = Net { bridge: format!("ab{tag}"), hosts: Vec::new() };
        // From here on Drop cleans up whatever was made, should a step fail.
        must("ip", &["link", "add", &net.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"]);
        must("ip", &["addr", "add", &format!("10.77.{subnet}.254/24"), "dev", &net.bridge]);
        must("ip", &["link", "set", &net.bridge, "up"]);
        for i in 0..n {
            let ns = format!("{PREFIX}{tag}-{i}");
            let peer_link = format!("ap{tag}-{i}");
            let client_link = format!("ac{tag}-{i}");
            let peer_ip = Ipv4Addr::new(10, 77, subnet, i as u8 + 1);
            let client_ip = Ipv4Addr::new(10, 78, subnet, 4 * i as u8 + 2);
            let our_client_ip = Ipv4Addr::new(10, 78, subnet, 4 * i as u8 + 1);
            must("ip", &["netns", "add", &ns]);
            net.hosts.push(Host { ns: ns.clone(), peer_ip, client_ip, peer_link: peer_link.clone() });
            must("ip", &["-n", &ns, "link", "set", "lo", "up"]);
            must("ip", &["link", "add", &peer_link, "type", "veth", "peer", "name", "peer0", "netns", &ns]);
            must("ip", &["link", "set", &peer_link, "master", &net.bridge, "up"]);
            must("ip", &["-n", &ns, "addr", "add", &format!("{peer_ip}/24"), "dev", "peer0"]);
            must("ip", &["-n", &ns, "link", "set", "peer0", "up"]);
            must(
                "ip",
                &["link", "add", &client_link, "type", "veth", "peer", "name", "client0", "netns", &ns],
            );
            must("ip", &["addr", "add", &format!("{our_client_ip}/30"), "dev", &client_link]);
            must("ip", &["link", "set", &client_link, "up"]);
            must("ip", &["-n", &ns, "addr", "add", &format!("{client_ip}/30"), "dev", "client0"]);
            must("ip", &["-n", &ns, "link", "set", "client0", "up"]);
        }
        net
    }

    /// Host `i`'s peer URL on `port`.
    pub fn peer_url(&self, i: usize, port: u16) -> String {
        format!("http://{}:{port}", self.hosts[i].peer_ip)
    }

    /// How a member on host `i` is started: in its namespace, its client URL on its client link.
    pub fn placement(&self, i: usize) -> Placement {
        Placement {
            wrapper: vec!["ip".into(), "netns".into(), "exec".into(), self.hosts[i].ns.clone()],
            host: Some(self.hosts[i].client_ip),
            port: Some(CLIENT_PORT),
        }
    }

    /// The client URL of a member on host `i`.
    pub fn client_url(&self, i: usize) -> String {
        format!("http://{}:{CLIENT_PORT}", self.hosts[i].client_ip)
    }

    /// Cuts host `i` off from every peer (its peer link down; the test still reaches it).
    pub fn partition(&self, i: usize) {
        must("ip", &["link", "set", &self.hosts[i].peer_link, "down"]);
    }

    /// Undoes [`Net::partition`].
    pub fn heal(&self, i: usize) {
        must("ip", &["link", "set", &self.hosts[i].peer_link, "up"]);
    }

    /// Shapes host `i`'s peer link, both ways, as `shape` says (see the module doc).
    pub fn slow(&self, i: usize, shape: Shape) {
        self.unshape(i);
        let host = &self.hosts[i];
        for (ns, dev) in [(None, host.peer_link.as_str()), (Some(host.ns.as_str()), "peer0")] {
            shaped(ns, dev, shape).unwrap_or_else(|e| panic!("shaping {dev}: {e}"));
        }
    }

    /// Undoes [`Net::slow`].
    pub fn unshape(&self, i: usize) {
        let host = &self.hosts[i];
        let _ = tc(None, &["qdisc", "del", "dev", &host.peer_link, "root"]);
        let _ = tc(Some(&host.ns), &["qdisc", "del", "dev", "peer0", "root"]);
    }

    /// Packets the shaping of host `i`'s peer link dropped so far, both ways (tail and random).
    pub fn dropped(&self, i: usize) -> u64 {
        let host = &self.hosts[i];
        let mut total = 0;
        for (ns, dev) in [(None, host.peer_link.as_str()), (Some(host.ns.as_str()), "peer0")] {
            let mut cmd = match ns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns, "tc"]);
                    c
                }
                None => Command::new("tc"),
            };
            let Ok(out) = cmd.args(["-s", "qdisc", "show", "dev", dev]).output() else { continue };
            // The root htb's line counts every drop below it.
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let root = text.split("qdisc ").find(|q| q.starts_with("htb 1:"));
            total += root
                .and_then(|q| q.split("dropped ").nth(1))
                .and_then(|d| d.split(',').next())
                .and_then(|d| d.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        total
    }
}

/// The htb, its two classes and the random filter on `dev`.
fn shaped(ns: Option<&str>, dev: &str, shape: Shape) -> Result<(), String> {
    let rate = format!("{}kbit", shape.rate_kbit);
    let queue = shape.queue.to_string();
    // Classic BPF: A = a random u32; a packet is sent to the dropping class 1:2 (-1: the
    // filter's classid) when A <= threshold, else goes on to the default class (0: no match).
    let threshold =
        (u64::from(shape.loss_percent.min(100)) * (u64::from(u32::MAX) + 1) / 100).min(u64::from(u32::MAX));
    let program = format!("4,32 0 0 4294963256,37 1 0 {threshold},6 0 0 4294967295,6 0 0 0");
    tc(ns, &["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])?;
    tc(
        ns,
        &["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", &rate, "burst", "4k"],
    )?;
    tc(ns, &["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", &queue])?;
    tc(ns, &["class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", &rate])?;
    // A pfifo that holds nothing drops everything sent to it.
    tc(ns, &["qdisc", "add", "dev", dev, "parent", "1:2", "handle", "20:", "pfifo", "limit", "0"])?;
    if shape.loss_percent > 0 {
        tc(
            ns,
            &[
                "filter", "add", "dev", dev, "parent", "1:", "protocol", "all", "prio", "1", "bpf",
                "bytecode", &program, "classid", "1:2",
            ],
        )?;
    }
    Ok(())
}

impl Drop for Net {
    fn drop(&mut self) {
        // A namespace's veths go with it, and with them their ends on our side.
        for host in &self.hosts {
            if let Err(e) = run("ip", &["netns", "del", &host.ns]) {
                eprintln!("netns: {e}");
            }
        }
        if let Err(e) = run("ip", &["link", "del", &self.bridge]) {
            eprintln!("netns: {e}");
        }
    }
}

/// A cluster whose members each run on a host of a [`Net`]. The cluster is declared first so
/// that it is dropped first: its members are killed before their namespaces go.
pub struct NetCluster {
    pub cluster: Cluster,
    pub net: Net,
}

impl NetCluster {
    /// `n` members of `kind` on hosts 0..n of a net of `n + spare` hosts (the spare ones for
    /// members added later), with `extra` flags.
    pub async fn start(kind: Kind, n: usize, spare: usize, extra: &[&str]) -> NetCluster {
        let net = Net::new(n + spare);
        let peers = (0..n).map(|i| net.peer_url(i, PEER_PORT)).collect();
        let places = (0..n).map(|i| net.placement(i)).collect();
        let cluster = Cluster::start_placed(kind, peers, extra, vec![Vec::new(); n], places).await;
        NetCluster { cluster, net }
    }
}

/// Whether this machine lets a test make namespaces (root, `ip` with netns support): a test
/// that needs them fails saying so rather than with a set-up error deep inside.
pub fn available() -> Result<(), String> {
    let probe = format!("{PREFIX}probe-{:x}", std::process::id());
    run("ip", &["netns", "add", &probe])?;
    let _ = run("ip", &["netns", "del", &probe]);
    run("tc", &["-V"])
}
