//! What each write needs of its user, in one place: the gRPC edge asks it before proposing
//! (to refuse early) and apply asks it again against the auth state at that point of the log
//! (etcd's authApplierV3), so the two can never disagree.
//!
//! - Put: WRITE on the key; READ on it too with `prev_kv`; with a lease, WRITE on every key
//!   the lease already holds (whoever cannot revoke the lease must not attach to it).
//! - DeleteRange: WRITE on the range; READ on it too with `prev_kv`.
//! - Txn: READ on every compare's range, and each op of both branches as if sent alone,
//!   nested txns included (etcd 3.4.44's fix: a txn's puts with prev_kv or a lease checked as
//!   lone puts).
//! - LeaseRevoke: a user, and WRITE on every key of the lease. A keep-alive renewal, which
//!   is no command (the leader's lessor renews in memory), needs the same, asked at the edge
//!   on every renewal (etcd 3.4.42 on).
//! - LeaseGrant: a user (etcd 3.4.42's fix of GHSA-q8m4-xhhv-38mg: before it, a client without
//!   a token could grant, keep alive and list leases, and raise alarms).
//! - Compact, Alarm (raise or clear), auth management: the root role.
//! - Authenticate: nothing (the password was the check).
//!
//! The root role passes every key check. See docs/etcd-auth.md, section 5 (etcd 3.4.45,
//! the newest 3.4, which is what actcd follows where 3.4.23 had holes).

use actcd_proto::etcdserverpb::{request_op::Request, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest};
use actcd_proto::key_range::KeyRange;

use crate::auth_store::auth_state::{AuthState, Need};
use crate::auth_store::caller::Caller;
use crate::auth_store::error::AuthError;
use crate::auth_store::permissions::Access;
use crate::Command;

/// The keys a lease holds, by lease id (none for an unknown lease).
pub type LeaseKeys<'a> = dyn Fn(i64) -> Vec<Box<[u8]>> + 'a;

/// Whether `caller` may have `command` applied, by the rules above, against `state`.
pub fn check_command(
    state: &AuthState,
    caller: &Caller,
    command: &Command,
    lease_keys: &LeaseKeys<'_>,
) -> Result<(), AuthError> {
    let Some((user, revision)) = checked(state, caller) else { return Ok(()) };
    let check = |need: Need<'_>| state.check(user, revision, need);
    match command {
        Command::Put(req) => put(&check, req, lease_keys),
        Command::DeleteRange(req) => delete(&check, req),
        Command::Txn(req) => txn(&check, req, lease_keys),
        Command::LeaseRevoke(req) => revoke(&check, req.id, lease_keys),
        Command::LeaseGrant(_) => check(Need::User),
        Command::Compact(_)
        | Command::Alarm(_)
        | Command::AuthEnable(_)
        | Command::AuthDisable(_)
        | Command::UserAdd(_)
        | Command::UserDelete(_)
        | Command::UserChangePassword(_)
        | Command::UserGrantRole(_)
        | Command::UserRevokeRole(_)
        | Command::RoleAdd(_)
        | Command::RoleDelete(_)
        | Command::RoleGrantPermission(_)
        | Command::RoleRevokePermission(_) => check(Need::Admin),
        Command::Authenticate(_) => Ok(()),
        // A header inside a header is refused when the log entry is decoded.
        Command::As(_) => Err(AuthError::PermissionDenied),
    }
}

/// Whether `caller` may run the read-only txn `req` (checked as a txn that writes would be).
pub fn check_read_only_txn(state: &AuthState, caller: &Caller, req: &TxnRequest) -> Result<(), AuthError> {
    let Some((user, revision)) = checked(state, caller) else { return Ok(()) };
    txn(&|need: Need<'_>| state.check(user, revision, need), req, &|_| Vec::new())
}

/// Whether `caller` may renew lease `id` (the revoke rule, see above).
pub fn check_renewal(
    state: &AuthState,
    caller: &Caller,
    id: i64,
    lease_keys: &LeaseKeys<'_>,
) -> Result<(), AuthError> {
    let Some((user, revision)) = checked(state, caller) else { return Ok(()) };
    revoke(&|need: Need<'_>| state.check(user, revision, need), id, lease_keys)
}

/// The user and revision to check, or `None` when nothing is checked.
fn checked<'c>(state: &AuthState, caller: &'c Caller) -> Option<(&'c str, u64)> {
    match caller {
        _ if !state.enabled() => None,
        Caller::Member => None,
        Caller::User { name, auth_revision } => Some((name.as_str(), *auth_revision)),
    }
}

type Check<'c> = dyn Fn(Need<'_>) -> Result<(), AuthError> + 'c;

fn put(check: &Check<'_>, req: &PutRequest, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
    check(Need::Keys(Access::Write, KeyRange::Key(&req.key)))?;
    if req.lease != 0 {
        lease(check, req.lease, lease_keys)?;
    }
    if req.prev_kv {
        check(Need::Keys(Access::Read, KeyRange::Key(&req.key)))?;
    }
    Ok(())
}

fn delete(check: &Check<'_>, req: &DeleteRangeRequest) -> Result<(), AuthError> {
    let range = KeyRange::new(&req.key, &req.range_end);
    check(Need::Keys(Access::Write, range))?;
    if req.prev_kv {
        check(Need::Keys(Access::Read, range))?;
    }
    Ok(())
}

/// LeaseRevoke's rule, and a renewal's: a user, and WRITE on every key of lease `id`.
fn revoke(check: &Check<'_>, id: i64, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
    check(Need::User)?;
    lease(check, id, lease_keys)
}

fn lease(check: &Check<'_>, id: i64, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
    lease_keys(id).iter().try_for_each(|key| check(Need::Keys(Access::Write, KeyRange::Key(key))))
}

fn txn(check: &Check<'_>, req: &TxnRequest, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
    for compare in &req.compare {
        check(Need::Keys(Access::Read, KeyRange::new(&compare.key, &compare.range_end)))?;
    }
    req.success.iter().chain(&req.failure).try_for_each(|op| txn_op(check, op, lease_keys))
}

fn txn_op(check: &Check<'_>, op: &RequestOp, lease_keys: &LeaseKeys<'_>) -> Result<(), AuthError> {
    match &op.request {
        Some(Request::RequestRange(r)) => {
            check(Need::Keys(Access::Read, KeyRange::new(&r.key, &r.range_end)))
        }
        Some(Request::RequestPut(p)) => put(check, p, lease_keys),
        Some(Request::RequestDeleteRange(d)) => delete(check, d),
        Some(Request::RequestTxn(t)) => txn(check, t, lease_keys),
        None => Ok(()),
    }
}
