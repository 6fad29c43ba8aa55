//! The arbiters (threads) that per-stream and per-connection actors run on: the serving threads'.
//! There is one such actor per Watch or LeaseKeepAlive stream and per connection that opened
//! one, and each runs on the thread that serves its connection, so that what it sends to the
//! client (and, for a watch stream, what its shard sends it) crosses no thread. A caller off the
//! serving threads (a test's in-process service) takes them in turn.

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

    /// The arbiter of the serving thread the caller runs on, else the next in turn; or
    /// UNAVAILABLE if the pool is empty (the server is stopping).
    pub fn next(&self) -> Result<&ArbiterHandle, Status> {
        if let Some(here) = crate::transport::serving::here().and_then(|i| self.handles.get(i)) {
            return Ok(here);
        }
        let n = self.handles.len().max(1);
        self.handles
            .get(self.next.fetch_add(1, Ordering::Relaxed) % n)
            .ok_or_else(|| EtcdError::Stopped.status())
    }
}
