//! The response header fields that identify this member, filled in on every response (by the
//! gRPC services, and by stream actors for watch responses).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use actcd_proto::etcdserverpb::ResponseHeader;

/// Identity stamped on response headers.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The cluster id.
    pub cluster_id: u64,
    /// This member's id.
    pub member_id: u64,
    /// The Raft term this member is in, shared by every clone: the cluster's task that follows
    /// openraft's metrics moves it on.
    raft_term: Arc<AtomicU64>,
    /// Whether this member is a learner now, moved by the same task: read on every call, so
    /// a flag rather than a look at the membership.
    learner: Arc<AtomicBool>,
}

impl Identity {
    /// The identity of member `member_id` of cluster `cluster_id` (derived from the bootstrap
    /// flags as etcd derives them, and bound to the data dir at its first start), in term 1
    /// until told otherwise.
    pub fn new(cluster_id: u64, member_id: u64) -> Self {
        Self { cluster_id, member_id, raft_term: Arc::new(AtomicU64::new(1)), learner: Arc::default() }
    }

    /// The current Raft term.
    pub fn raft_term(&self) -> u64 {
        self.raft_term.load(Ordering::Relaxed)
    }

    /// Moves to Raft term `term`, for every clone.
    pub fn set_raft_term(&self, term: u64) {
        self.raft_term.store(term, Ordering::Relaxed);
    }

    /// Whether this member is a learner (a member that is no voter).
    pub fn is_learner(&self) -> bool {
        self.learner.load(Ordering::Relaxed)
    }

    /// Records whether this member is a learner, for every clone.
    pub fn set_learner(&self, learner: bool) {
        self.learner.store(learner, Ordering::Relaxed);
    }

    /// Fills the identity into a header, keeping its revision (and creating it if absent).
    pub fn fill(&self, header: &mut Option<ResponseHeader>) {
        let h = header.get_or_insert_with(ResponseHeader::default);
        h.cluster_id = self.cluster_id;
        h.member_id = self.member_id;
        h.raft_term = self.raft_term();
    }

    /// A header at `revision`.
    pub fn header(&self, revision: i64) -> Option<ResponseHeader> {
        let mut h = Some(ResponseHeader { revision, ..Default::default() });
        self.fill(&mut h);
        h
    }
}
