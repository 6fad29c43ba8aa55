//! The stop signal of a run: set once, with the first reason, by Ctrl-C, a fatal error, the
//! stall watchdog or a row's time limit. Every client task, stream and watchdog of a command
//! watches the same signal, so one reason ends them all and the report says which.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Default)]
pub struct Stop {
    tx: Arc<watch::Sender<bool>>,
    reason: Arc<Mutex<Option<String>>>,
}

impl Stop {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the signal; the first reason given is kept.
    pub fn stop(&self, reason: impl Into<String>) {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| reason.into());
        self.tx.send_replace(true);
    }

    /// `result`'s value, or `None` after stopping with its error.
    pub fn check<T>(&self, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.stop(e)).ok()
    }

    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub async fn stopped(&self) {
        // The sender lives as long as this `Stop`, so the wait ends only with the signal.
        let _ = self.tx.subscribe().wait_for(|s| *s).await;
    }

    /// A signal of its own (for one row) that this one also sets, and the task that forwards it.
    pub fn child(&self) -> (Stop, JoinHandle<()>) {
        let (parent, child) = (self.clone(), Stop::new());
        let c = child.clone();
        let forward = tokio::spawn(async move {
            parent.stopped().await;
            c.stop(parent.reason().unwrap_or_else(|| "stopped".to_string()));
        });
        (child, forward)
    }

    /// Stops after `limit` (a row's time limit) unless the returned task is aborted first.
    pub fn after(&self, limit: Duration) -> JoinHandle<()> {
        let stop = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            stop.stop(format!("the row ran over the {limit:?} row time limit"));
        })
    }
}
