//! etcd's require-leader metadata (`hasleader: true`, which clientv3's `WithRequireLeader` sets,
//! and etcdctl watch and the apiserver send): a call carrying it on a member that knows no
//! leader fails at once with "etcdserver: no leader" instead of waiting for one, and a watch
//! stream carrying it is cancelled with that error once its member has been without a leader
//! for three election timeouts (etcd's monitorLeader: three checks, one per election timeout).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use openraft::Raft;
use tonic::metadata::MetadataMap;
use tonic::Status;

use actcd_proto::errors::EtcdError;
use actcd_raft::types::TypeConfig;

/// etcd's metadata key and value (rpctypes.MetadataRequireLeaderKey, MetadataHasLeader).
const KEY: &str = "hasleader";
const VALUE: &str = "true";

/// Checks without a leader before a stream is cancelled (etcd's maxNoLeaderCnt).
const CHECKS: u32 = 3;

/// Whether this member knows a leader, for the calls that require one.
#[derive(Clone)]
pub struct RequireLeader {
    raft: Raft<TypeConfig>,
    election_timeout: Duration,
}

impl RequireLeader {
    /// Over this member's `raft`, checking once per `election_timeout` on streams.
    pub fn new(raft: Raft<TypeConfig>, election_timeout: Duration) -> Self {
        Self { raft, election_timeout }
    }

    fn has_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader.is_some()
    }

    /// Whether a call's metadata asks for a leader.
    pub fn asked(metadata: &MetadataMap) -> bool {
        metadata.get(KEY).and_then(|v| v.to_str().ok()) == Some(VALUE)
    }

    /// Refuses a call that asks for a leader when there is none.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        if Self::asked(metadata) && !self.has_leader() {
            return Err(EtcdError::NoLeader.status());
        }
        Ok(())
    }

    /// An interceptor for tonic services doing [`RequireLeader::check`].
    pub fn interceptor(
        &self,
    ) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, Status> + Clone {
        let this = self.clone();
        move |request: tonic::Request<()>| {
            this.check(request.metadata())?;
            Ok(request)
        }
    }

    /// Resolves once this member has been without a leader at three checks in a row.
    pub fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let this = self.clone();
        Box::pin(async move {
            let mut ticks = tokio::time::interval(this.election_timeout);
            let mut without = 0;
            loop {
                ticks.tick().await;
                without = if this.has_leader() { 0 } else { without + 1 };
                if without >= CHECKS {
                    return;
                }
            }
        })
    }
}
