//! The response header fields that identify this member, filled in on every response (by the
//! gRPC services, and by stream actors for watch responses).

use actcd_proto::etcdserverpb::ResponseHeader;

/// Identity stamped on response headers.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    /// The cluster id.
    pub cluster_id: u64,
    /// This member's id.
    pub member_id: u64,
    /// The raft term: 1, since a single member that never held an election stays in its first term.
    pub raft_term: u64,
}

impl Identity {
    /// Derives stable ids from the member name and its advertised URLs, as etcd derives them
    /// from its configuration, so a restart keeps them.
    pub fn new(name: &str, advertise_urls: &[String]) -> Self {
        let mut seed = name.to_string();
        for url in advertise_urls {
            seed.push('\n');
            seed.push_str(url);
        }
        let member_id = fnv1a(seed.as_bytes()).max(1);
        let cluster_id = fnv1a(&member_id.to_be_bytes()).max(1);
        Self { cluster_id, member_id, raft_term: 1 }
    }

    /// Fills the identity into a header, keeping its revision (and creating it if absent).
    pub fn fill(&self, header: &mut Option<ResponseHeader>) {
        let h = header.get_or_insert_with(ResponseHeader::default);
        h.cluster_id = self.cluster_id;
        h.member_id = self.member_id;
        h.raft_term = self.raft_term;
    }

    /// A header at `revision`.
    pub fn header(&self, revision: i64) -> Option<ResponseHeader> {
        let mut h = Some(ResponseHeader { revision, ..Default::default() });
        self.fill(&mut h);
        h
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
