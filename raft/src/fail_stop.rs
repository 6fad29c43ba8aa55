//! Fail-stop, as etcd does it: a failed write to the log or to the state machine ends the
//! process (after an fsync error the kernel may have dropped the dirty pages, so neither the
//! memory nor the disk can be vouched for; a restart recovers from what the disk holds).
//! openraft stops its core on such an error; this tells the process why, once.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Where the first failed write reports. Clones share the one channel.
#[derive(Clone, Default)]
pub struct FailStop(Arc<Mutex<Option<oneshot::Sender<String>>>>);

impl FailStop {
    /// Reports to `tx`.
    pub fn new(tx: oneshot::Sender<String>) -> Self {
        Self(Arc::new(Mutex::new(Some(tx))))
    }

    /// Reports `reason`, if nothing was reported before.
    pub fn stop(&self, reason: impl std::fmt::Display) {
        tracing::error!(%reason, "the store takes no more writes");
        let sender = match self.0.lock() {
            Ok(mut slot) => slot.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(tx) = sender {
            let _ = tx.send(reason.to_string());
        }
    }
}
