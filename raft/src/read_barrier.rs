//! Linearizable reads, coalesced as etcd coalesces them: a read waits for the next read-index
//! round, and one round (one heartbeat exchange with a quorum, or one ReadIndex call to the
//! leader) serves every read that queued before it started. A read that arrives while a round
//! is out waits for the one after it: that round's index may predate a write the reader saw
//! acknowledged.

use tokio::sync::{mpsc, oneshot};

use super::route::Route;
use actcd_store::StoreError;

type Waiter = oneshot::Sender<Result<(), StoreError>>;

/// Hands reads to the round task.
#[derive(Clone)]
pub struct ReadBarrier {
    route: Route,
    /// Reads waiting for the next round. Bounded (`capacity`): when full, a reader waits for
    /// room, so a flood of reads queues in the callers, not here.
    queue: mpsc::Sender<Waiter>,
}

impl ReadBarrier {
    /// Starts the round task on the current tokio runtime.
    pub fn start(route: Route, capacity: usize) -> Self {
        let (queue, mut waiting) = mpsc::channel::<Waiter>(capacity.max(1));
        let rounds = route.clone();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(first) = waiting.recv().await {
                batch.push(first);
                while let Ok(next) = waiting.try_recv() {
                    batch.push(next);
                }
                let result = rounds.read_barrier().await;
                for waiter in batch.drain(..) {
                    // A reader that went away no longer wants its answer.
                    let _ = waiter.send(result.clone());
                }
            }
        });
        Self { route, queue }
    }

    /// Waits until this member has applied every write acknowledged before the call.
    pub async fn wait(&self) -> Result<(), StoreError> {
        if self.route.alone() {
            return Ok(());
        }
        let (waiter, answer) = oneshot::channel();
        self.queue.send(waiter).await.map_err(|_| StoreError::Stopped("read barrier stopped".into()))?;
        answer.await.map_err(|_| StoreError::Stopped("read barrier stopped".into()))?
    }
}
