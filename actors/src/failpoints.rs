//! Failpoints at the group commit's boundaries, so that tests can hold or stop the single
//! writer exactly there. They exist only with the `failpoints` feature, which the test build
//! turns on; otherwise each point compiles to nothing and [`configure_from_env`] does nothing.
//!
//! - `store::before_commit`: the batch is applied (revisions assigned, the index updated in
//!   memory) but nothing of it is written or fsynced yet;
//! - `store::after_fsync`: the batch's WriteBatch is written and fsynced, but not yet visible to
//!   readers and not answered;
//! - `store::before_notify`: the batch is visible and answered, its events not yet sent to the
//!   watch tree.

/// Configures the failpoints named in `FAILPOINTS` (`name=actions;...`, in the fail crate's
/// action syntax, e.g. `store::before_commit=sleep(1500)`). A build without the `failpoints`
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
