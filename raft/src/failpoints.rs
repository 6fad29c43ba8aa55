//! Failpoints at a write's boundaries on its way through the Raft log, and after a read, so
//! that tests can hold or stop one exactly there. They exist only with the `failpoints`
//! feature, which the test build turns on; otherwise each point compiles to nothing and
//! [`configure_from_env`] does nothing.
//!
//! - `log::before_append`: the batch is proposed but its log entry is neither written nor
//!   fsynced yet (held inside the log append);
//! - `log::after_fsync`: the entry is written and fsynced in the log, but not yet applied,
//!   visible to readers or answered (a restart replays it);
//! - `apply::before_notify`: the batch is applied, visible and answered, its events not yet
//!   sent to the watch tree (held on a thread of its own, off the apply path);
//! - `grpc::after_range`: a range is read from the view, not yet answered (where the edge's
//!   auth revision check after a read must still refuse it); see [`hold`].

/// Configures the failpoints named in `FAILPOINTS` (`name=actions;...`, in the fail crate's
/// action syntax, e.g. `log::before_append=sleep(1500)`). A build without the `failpoints`
/// feature ignores the variable.
#[cfg(feature = "failpoints")]
pub fn configure_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var("FAILPOINTS") else {
        return Ok(());
    };
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) =
            entry.split_once('=').ok_or_else(|| format!("{entry:?} is not name=actions"))?;
        fail::cfg(name.trim(), actions.trim()).map_err(|err| format!("{name}: {err}"))?;
    }
    Ok(())
}

/// Configures the failpoints named in `FAILPOINTS`: a build without the `failpoints` feature
/// has none, and ignores the variable.
#[cfg(not(feature = "failpoints"))]
pub fn configure_from_env() -> Result<(), String> {
    Ok(())
}

/// Holds the caller at failpoint `name` when it is configured `return(MS)`: MS milliseconds,
/// awaited, not slept (a `sleep` action would stop the runtime's worker thread and, with it,
/// whatever the test wants to happen during the hold). Only requests for a key ending in
/// `/held` are held, so that a server's other requests (its start-up probe) go on.
#[cfg(feature = "failpoints")]
pub async fn hold(name: &str, key: &[u8]) {
    if !key.ends_with(b"/held") {
        return;
    }
    if let Some(Some(ms)) = fail::eval(name, |arg| arg.and_then(|a| a.parse::<u64>().ok())) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Holds nothing: a build without the `failpoints` feature has no failpoints.
#[cfg(not(feature = "failpoints"))]
pub async fn hold(_name: &str, _key: &[u8]) {}
