//! The applied lease changes, pushed by the member's state machine to its lessor as each batch
//! is applied (issue 42's "apply stream as the only bus", for the lessor): a grant's countdown
//! starts when the grant is applied, on every member, and the lessor never reads the store
//! core under its lock to learn what changed.
//!
//! A bounded, lossy hop that the receiver repairs, as the watch tree's: the state machine never
//! waits. When the channel is full the batch is dropped and the loss noted; the lessor's next
//! look reports it as [`LeaseChange::Reloaded`], and the lessor lists the leases from storage
//! (that listing holds everything applied up to then, the dropped batch included).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{mpsc, Notify};

use actcd_store::LeaseChange;

/// The state machine's end.
#[derive(Clone)]
pub struct LeaseFeed {
    changes: mpsc::Sender<Vec<LeaseChange>>,
    lost: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

/// The lessor's end.
pub struct LeaseChanges {
    changes: mpsc::Receiver<Vec<LeaseChange>>,
    lost: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

/// A feed holding at most `batches` applied batches' changes that the lessor has not taken.
pub fn channel(batches: usize) -> (LeaseFeed, LeaseChanges) {
    let (sender, receiver) = mpsc::channel(batches.max(1));
    let (lost, wake) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let feed = LeaseFeed { changes: sender, lost: Arc::clone(&lost), wake: Arc::clone(&wake) };
    (feed, LeaseChanges { changes: receiver, lost, wake })
}

impl LeaseFeed {
    /// Hands over one applied batch's changes; never waits (full: see the module's text).
    pub fn send(&self, changes: Vec<LeaseChange>) {
        if changes.is_empty() {
            return;
        }
        if self.changes.try_send(changes).is_err() {
            self.lost.store(true, Ordering::Release);
        }
        self.wake.notify_one();
    }
}

impl LeaseChanges {
    /// Every change handed over since the last call, in the order applied; only
    /// [`LeaseChange::Reloaded`] when some were dropped.
    pub fn take(&mut self) -> Vec<LeaseChange> {
        let mut changes = Vec::new();
        while let Ok(batch) = self.changes.try_recv() {
            changes.extend(batch);
        }
        if self.lost.swap(false, Ordering::AcqRel) {
            return vec![LeaseChange::Reloaded];
        }
        changes
    }

    /// Yields each time changes were handed over (once for several that came meanwhile).
    pub fn arrivals(&self) -> impl Stream<Item = ()> + Unpin + 'static {
        Box::pin(futures::stream::unfold(Arc::clone(&self.wake), |wake| async move {
            wake.notified().await;
            Some(((), wake))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_in_order_and_a_dropped_batch_comes_as_a_reload() {
        let (feed, mut changes) = channel(2);
        feed.send(vec![LeaseChange::Granted { id: 1, ttl: 5 }]);
        feed.send(vec![]);
        feed.send(vec![LeaseChange::Revoked(1), LeaseChange::Granted { id: 2, ttl: 9 }]);
        assert_eq!(
            changes.take(),
            [
                LeaseChange::Granted { id: 1, ttl: 5 },
                LeaseChange::Revoked(1),
                LeaseChange::Granted { id: 2, ttl: 9 }
            ]
        );
        assert_eq!(changes.take(), []);
        for id in 3..6 {
            feed.send(vec![LeaseChange::Granted { id, ttl: 5 }]);
        }
        assert_eq!(changes.take(), [LeaseChange::Reloaded], "the third batch found the channel full");
        feed.send(vec![LeaseChange::Revoked(3)]);
        assert_eq!(changes.take(), [LeaseChange::Revoked(3)], "the reload was reported once");
    }
}
