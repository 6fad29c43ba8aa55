//! One budget, in bytes, for the answers of large reads while they are built and until they
//! have gone out: Range (gRPC and the JSON gateway), read-only Txn and RangeStream's chunks all
//! take from it. etcd has nothing like it: each of twenty informers relisting at once costs
//! etcd a copy of the whole keyspace (etcd issue 12342); here the twenty share the budget and
//! wait for one another instead of running the server out of memory.
//!
//! Why it cannot deadlock: a Range's answer goes out only once it is whole (the gRPC prefix
//! names its length), so an answer being built holds its bytes until it is finished. Were two
//! answers built at once, each could hold half the budget and wait for the other's half. So
//! one large read builds at a time (it holds the building turn, first come first served) and
//! only it waits for bytes; everything it waits for is held by answers already built, which
//! give their bytes back as HTTP/2 sends them (or as the stall timeout drops them). The next
//! read's building overlaps the previous answers' sending: a budget of a little more than one
//! answer keeps both the reading and the sending busy.
//!
//! An answer larger than the whole budget waits until every other answer is gone, then goes
//! over the budget alone, so a read that could never fit still runs. Small reads
//! ([`ReadBudget::is_large`]) take no turn and never wait: a point read does not queue behind a
//! list; they take what is free for their pieces and go over the budget otherwise, bounded by
//! the connection's Range slots ([`crate::transport::range_backpressure`]).

use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// Estimates from here up share the budget.
const LARGE_READ_BYTES: u64 = 1 << 20;

/// The budget every large read takes from. Clones share it.
#[derive(Clone)]
pub struct ReadBudget {
    bytes: Arc<Semaphore>,
    total: usize,
    turn: Arc<Mutex<()>>,
}

impl ReadBudget {
    /// A budget of `bytes` (at most 4 GiB: tokio's semaphore counts in u32 steps).
    pub fn new(bytes: usize) -> Self {
        let total = bytes.clamp(1, u32::MAX as usize);
        Self { bytes: Arc::new(Semaphore::new(total)), total, turn: Arc::new(Mutex::new(())) }
    }

    /// Whether a read of `estimated` bytes shares the budget.
    pub fn is_large(estimated: u64) -> bool {
        estimated >= LARGE_READ_BYTES
    }

    /// Starts a read of about `estimated` bytes: a large one waits for the building turn.
    pub async fn start(&self, estimated: u64) -> Reservation {
        let turn = match Self::is_large(estimated) {
            true => Some(Arc::clone(&self.turn).lock_owned().await),
            false => None,
        };
        Reservation { budget: self.clone(), turn, held: 0 }
    }

    /// `n` bytes for an answer built whole before it is accounted for (the gateway's, a
    /// txn's, a RangeStream chunk): taken in turn, held until the permit is dropped.
    pub async fn hold(&self, n: u64) -> Option<OwnedSemaphorePermit> {
        self.start(n).await.take(usize::try_from(n).unwrap_or(usize::MAX)).await
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

/// One read's place in the budget: its building turn, if large, and what it took so far.
pub struct Reservation {
    budget: ReadBudget,
    turn: Option<OwnedMutexGuard<()>>,
    held: usize,
}

impl Reservation {
    /// Takes `n` bytes for one piece of the answer; the permit gives them back when dropped.
    /// With the turn it waits for them (for all that is not its own, when its own and `n`
    /// are more than the budget); without, it takes them only if free. `None`: the piece
    /// goes over the budget.
    pub async fn take(&mut self, n: usize) -> Option<OwnedSemaphorePermit> {
        let wanted = n.min(self.budget.total - self.held.min(self.budget.total));
        let permits = u32::try_from(wanted).unwrap_or(u32::MAX);
        let bytes = Arc::clone(&self.budget.bytes);
        let permit = match (&self.turn, permits) {
            (_, 0) => None,
            // The semaphore is never closed.
            (Some(_), _) => bytes.acquire_many_owned(permits).await.ok(),
            (None, _) => bytes.try_acquire_many_owned(permits).ok(),
        };
        self.held += permit.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        permit
    }
}
