//! The arbiters (threads) that per-stream and per-connection actors are spread over. There is
//! one such actor per Watch or LeaseKeepAlive stream and per connection that opened one, too
//! many for a thread each, so the Watch and Lease services take a few shared arbiters in turn;
//! the writer and each watch shard, whose work blocks, get arbiters of their own in `server`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actcd_proto::errors::EtcdError;
use actix::ArbiterHandle;
use tonic::Status;

/// A round-robin pool of arbiters, shared by the Watch and Lease services.
#[derive(Debug)]
pub struct ArbiterPool {
    handles: Vec<ArbiterHandle>,
    next: AtomicUsize,
}

impl ArbiterPool {
    /// A pool over `handles`.
    pub fn new(handles: Vec<ArbiterHandle>) -> Arc<Self> {
        Arc::new(Self { handles, next: AtomicUsize::new(0) })
    }

    /// The next arbiter, or UNAVAILABLE if the pool is empty (the server is stopping).
    pub fn next(&self) -> Result<&ArbiterHandle, Status> {
        let n = self.handles.len().max(1);
        self.handles
            .get(self.next.fetch_add(1, Ordering::Relaxed) % n)
            .ok_or_else(|| EtcdError::Stopped.status())
    }
}
