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
    /// The identity of member `member_id` of cluster `cluster_id` (derived from the bootstrap
    /// flags as etcd derives them, and bound to the data dir at its first start).
    pub fn new(cluster_id: u64, member_id: u64) -> Self {
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
