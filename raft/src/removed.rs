//! The members removed from the cluster, for good: ids that may never be members again, and
//! the signal by which this member learns it is one of them.
//!
//! openraft neither tells nor stops a node it removed. etcd keeps the removed ids in its
//! backend, and its peers answer a removed member's messages so that it learns and exits; so
//! does actcd: the state machine adds the ids a committed membership dropped to this set, in
//! the same batch as the membership itself (so a restart or a snapshot brings the set along),
//! the peer service refuses frames from these ids with [`REMOVED_TEXT`], and a member that is
//! told so, or applies its own removal, logs etcd's line and exits with status 0.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;

/// etcd's words for a removed member, logged by it as it exits and sent by its peers.
pub const REMOVED_TEXT: &str = "the member has been permanently removed from the cluster";

/// The removed ids, shared by the state machine (which records them), the peer service
/// (which refuses them) and the process (which exits when its own id is among them).
#[derive(Debug, Clone)]
pub struct Removed(Arc<watch::Sender<BTreeSet<u64>>>);

impl Default for Removed {
    fn default() -> Self {
        Self::new(BTreeSet::new())
    }
}

impl Removed {
    /// The set as the data dir recorded it.
    pub fn new(ids: BTreeSet<u64>) -> Self {
        Self(Arc::new(watch::Sender::new(ids)))
    }

    /// Whether `id` was removed.
    pub fn contains(&self, id: u64) -> bool {
        self.0.borrow().contains(&id)
    }

    /// Every removed id.
    pub fn ids(&self) -> BTreeSet<u64> {
        self.0.borrow().clone()
    }

    /// Replaces the set with what the state machine applied or installed.
    pub fn set(&self, ids: BTreeSet<u64>) {
        self.0.send_replace(ids);
    }

    /// Records that `id` was removed, as a peer told this member (not persisted: a restart
    /// learns it again from the peers).
    pub fn mark(&self, id: u64) {
        self.0.send_if_modified(|ids| ids.insert(id));
    }

    /// Resolves once `id` is among the removed.
    pub async fn wait_for(&self, id: u64) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|ids| ids.contains(&id)).await;
    }
}

/// The ids in `before` that `after` no longer has: a uniform membership drops a member only
/// once the change that removed it is complete (a joint membership still lists it).
pub fn dropped<'a>(before: impl Iterator<Item = &'a u64>, after: &BTreeSet<u64>) -> Vec<u64> {
    before.filter(|id| !after.contains(id)).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_member_waiting_for_its_removal_wakes_when_it_is_marked() {
        let removed = Removed::default();
        let waiting = tokio::spawn({
            let removed = removed.clone();
            async move { removed.wait_for(7).await }
        });
        removed.mark(3);
        assert!(!waiting.is_finished());
        removed.mark(7);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("woken").expect("ran");
        assert_eq!(removed.ids(), BTreeSet::from([3, 7]));
        let after = BTreeSet::from([1, 2]);
        assert_eq!(dropped([1, 2, 4].iter(), &after), vec![4]);
    }
}
