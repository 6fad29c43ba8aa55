//! systemd's `Type=notify` (packaging/actcd.service): READY=1 when the member can answer,
//! STOPPING=1 when it starts to shut down, as etcd tells systemd. Without NOTIFY_SOCKET
//! (not started by systemd) nothing is sent.
//!
//! "Can answer" is etcd's meaning: its READY=1 waits for its ReadyNotify, which needs its
//! membership publish committed, so a leader. actcd sends it once its client listeners serve
//! and a leader is known; a member of a cluster whose others are not up yet stays "activating"
//! in systemd, as an etcd member does.

use actcd_raft::types::TypeConfig;
use openraft::Raft;
use sd_notify::NotifyState;

/// Sends READY=1 once `raft` knows a leader (called once the listeners serve).
pub async fn ready_once_led(raft: Raft<TypeConfig>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let mut metrics = raft.metrics();
    while metrics.borrow_and_update().current_leader.is_none() {
        if metrics.changed().await.is_err() {
            return; // the Raft stopped: the process is ending, never ready
        }
    }
    match sd_notify::notify(false, &[NotifyState::Ready]) {
        Ok(()) => tracing::info!("told systemd the member is ready"),
        Err(err) => tracing::warn!(%err, "cannot tell systemd the member is ready"),
    }
}

/// Sends STOPPING=1: systemd then shows "deactivating" while in-flight requests finish.
pub fn stopping() {
    if let Err(err) = sd_notify::notify(false, &[NotifyState::Stopping]) {
        tracing::debug!(%err, "cannot tell systemd the member is stopping");
    }
}
