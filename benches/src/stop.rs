//! The stop signal of a run: set once, with the first reason, by Ctrl-C, a fatal error, the
//! stall watchdog or a row's time limit. Every client task, stream and watchdog of a command
//! watches the same signal, so one reason ends them all and the report says which.

use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The stop signal: set once, with the first reason, by Ctrl-C, a fatal error or the watchdog.
#[derive(Clone)]
pub struct Stop {
    tx: Arc<watch::Sender<bool>>,
    reason: Arc<Mutex<Option<String>>>,
}

impl Default for Stop {
    fn default() -> Self {
        Self::new()
    }
}

impl Stop {
    /// A signal not yet set.
    pub fn new() -> Self {
        Self { tx: Arc::new(watch::channel(false).0), reason: Arc::new(Mutex::new(None)) }
    }

    /// Sets the signal; the first reason given is kept.
    pub fn stop(&self, reason: impl Into<String>) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if r.is_none() {
                *r = Some(reason.into());
            }
        }
        self.tx.send_replace(true);
    }

    /// `result`'s value, or `None` after stopping with its error.
    pub fn check<T>(&self, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.stop(e)).ok()
    }

    /// Whether the signal is set.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }

    /// Why the run stopped early, if it did.
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A receiver for [`Stop::stopped`].
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    /// Resolves once the signal is set.
    pub async fn stopped(rx: &mut watch::Receiver<bool>) {
        if rx.wait_for(|s| *s).await.is_err() {
            // The sender lives as long as any `Stop`; if it is gone nobody can stop us.
            std::future::pending::<()>().await;
        }
    }
}
