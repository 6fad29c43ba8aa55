//! One budget, in bytes, for the answers of large reads while they are built and until they
//! have gone out: Range (gRPC and the JSON gateway), read-only Txn and RangeStream's chunks all
//! take from it. etcd has nothing like it: each of twenty informers relisting at once costs
//! etcd a copy of the whole keyspace (etcd issue 12342); here the twenty share the budget and
//! wait for one another instead of running the server out of memory.
//!
//! A read reserves its estimated size before it reads ([`ReadBudget::reserve`], first come
//! first served), then takes its reservation piece by piece as it builds the answer
//! ([`Reservation::take`]); each piece is given back when the bytes it accounts for are gone
//! (sent, or dropped). An answer larger than its estimate takes the difference only if the
//! budget has it free at once, and otherwise goes over the budget by that much: it must not
//! wait while it holds a part, or two such answers could each wait for the other's part.
//! An estimate larger than the whole budget reserves the whole budget, so a read that could
//! never fit still runs, alone.
//!
//! Small reads do not take part ([`ReadBudget::is_large`]): waiting behind a large list would
//! cost a point read its latency, and what they hold is bounded by the connection's Range slots
//! ([`crate::transport::range_backpressure`]).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default budget: one 200k × 1 KiB list (the 20-list target) fits with room.
pub const DEFAULT_READ_BUDGET_BYTES: usize = 256 << 20;

/// Estimates from here up share the budget.
const LARGE_READ_BYTES: u64 = 1 << 20;

/// The budget every large read takes from. Clones share it.
#[derive(Clone)]
pub struct ReadBudget {
    bytes: Arc<Semaphore>,
    total: u32,
}

impl ReadBudget {
    /// A budget of `bytes` (at most 4 GiB: tokio's semaphore counts in u32 steps).
    pub fn new(bytes: usize) -> Self {
        let total = u32::try_from(bytes).unwrap_or(u32::MAX).max(1);
        Self { bytes: Arc::new(Semaphore::new(total as usize)), total }
    }

    /// Whether a read of `estimated` bytes shares the budget.
    pub fn is_large(estimated: u64) -> bool {
        estimated >= LARGE_READ_BYTES
    }

    /// Waits, behind the reads that asked before, until `estimated` bytes (at most the whole
    /// budget) are free, and reserves them. A small read reserves nothing and never waits.
    pub async fn reserve(&self, estimated: u64) -> Reservation {
        let mut reservation = Reservation { budget: Arc::clone(&self.bytes), held: None };
        if Self::is_large(estimated) {
            let want = u32::try_from(estimated).unwrap_or(u32::MAX).min(self.total);
            // The semaphore is never closed.
            reservation.held = Arc::clone(&self.bytes).acquire_many_owned(want).await.ok();
        }
        reservation
    }

    /// Bytes free now, for the tests and the metrics.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

/// What one read reserved and has not yet taken.
pub struct Reservation {
    budget: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    /// Takes `n` bytes for one piece of the answer: from the reservation, then whatever of the
    /// rest the budget has free at once. The permit returns them when dropped; `None` when the
    /// piece is over the budget entirely.
    pub fn take(&mut self, n: usize) -> Option<OwnedSemaphorePermit> {
        let held = self.held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        if held > n {
            return self.held.as_mut().and_then(|permit| permit.split(n));
        }
        let mut piece = self.held.take();
        let missing = u32::try_from(n - held).unwrap_or(u32::MAX);
        if missing > 0 {
            if let Ok(more) = Arc::clone(&self.budget).try_acquire_many_owned(missing) {
                match piece.as_mut() {
                    Some(piece) => piece.merge(more),
                    None => piece = Some(more),
                }
            }
        }
        piece
    }
}
