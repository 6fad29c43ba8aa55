//! The single writer, [`StoreCore`]: applies commands in order into a [`Batch`], then commits
//! the batch with one engine write and one fsync, then makes it visible to readers at once (the
//! rule is in [`crate::mvcc::shared`]). Every write rule sits on this path, once, in etcd's order:
//! validation, the request size, the active alarms, the user's permissions (at the auth state
//! of this point in the log), the quota, then the fit in one revision
//! and compaction's bounds; so a replicated log can feed it the same commands and the gRPC edge
//! only decodes, submits and encodes.
//!
//! A command that fails before it changes anything leaves the store as it was; one that fails
//! after a change, or a commit that fails, stops the writer for good (fail-stop): it can no
//! longer vouch for what the index or the disk holds.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use actcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, ResponseHeader, TxnRequest,
};
use actcd_proto::mvccpb::Event;

use crate::apply::alarm::AlarmList;
use crate::apply::command::{Command, CommandResponse};
use crate::apply::validate;
use crate::auth_store::needs::check_command;
use crate::auth_store::simple_tokens::SimpleTokens;
use crate::auth_store::{AuthState, Caller};
use crate::backend::codec::{self, AppliedPosition, APPLIED_KEY, COMPACTED_KEY, LEGACY_APPLIED_INDEX_KEY};
use crate::backend::engine::{Engine, Family, WriteSet};
use crate::backend::member::{self, MemberIds};
use crate::backend::recovery::{recover, Recovered};
use crate::error::StoreError;
use crate::lease_store::index::LeaseIndex;
use crate::mvcc::batch::{Batch, TokenChange};
use crate::mvcc::put_delete::WriteTxn;
use crate::mvcc::read_view::ReadView;
use crate::mvcc::shared::Shared;
use crate::mvcc::txn;

/// Limits the writer enforces.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// etcd's `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// etcd's `--quota-backend-bytes`; writes that would pass it are refused.
    pub quota_bytes: u64,
    /// etcd's `--max-request-bytes`: a bigger marshalled request is refused.
    pub max_request_bytes: usize,
    /// The cluster and member the data dir must belong to (bound at its first open); `None`
    /// opens any (tests, fuzzing, snapshot restore).
    pub member: Option<MemberIds>,
    /// etcd's `--auth-token-ttl`: how long a simple token lives after its last use.
    pub token_ttl: Duration,
}

impl Default for StoreConfig {
    /// etcd's defaults.
    fn default() -> Self {
        Self {
            max_txn_ops: 128,
            quota_bytes: 2 << 30,
            max_request_bytes: 1536 * 1024,
            member: None,
            token_ttl: Duration::from_secs(300),
        }
    }
}

/// etcd's per-put quota overhead, so that quota decisions match etcd's.
const KV_QUOTA_OVERHEAD: u64 = 256;

/// The events of one committed batch: every revision in `(prev_revision, revision]`, in order.
/// A consumer that last saw `prev_revision` can apply them directly; one that saw less has a gap
/// to fill from [`ReadView::history`].
#[derive(Debug, Clone, PartialEq)]
pub struct CommittedEvents {
    /// The visible revision before the batch.
    pub prev_revision: i64,
    /// The visible revision after the batch.
    pub revision: i64,
    /// The batch's events (each event's kv.mod_revision is its revision).
    pub events: Vec<Event>,
}

/// The single writer: applies commands in order into a [`Batch`], then commits the batch with
/// one engine write and one fsync, then makes it visible.
pub struct StoreCore<E> {
    shared: Arc<Shared<E>>,
    config: StoreConfig,
    /// Revision of the last applied command (may be ahead of `visible` until the commit).
    pub(crate) current: i64,
    /// The last log entry committed (none before the first).
    applied: Option<AppliedPosition>,
    /// The old second record of the position is still on disk, for the next commit to delete.
    legacy_applied: bool,
    /// Set when a commit failed: the writer can no longer vouch for its state (fail-stop).
    failed: Option<String>,
    /// Leases and their keys (writer-owned: only commands change them).
    pub(crate) leases: LeaseIndex,
    /// The active alarms as applied, ahead of what readers see until the commit.
    alarms: AlarmList,
    /// The auth state as applied, ahead of what readers see until the commit.
    pub(crate) auth: AuthState,
    /// Lease grants and revokes applied since the state machine last took them for the lessor,
    /// when there is one ([`StoreCore::journal_leases`]); `None` otherwise, so that nothing
    /// piles up.
    pub(crate) lease_journal: Option<Vec<LeaseChange>>,
}

/// A change to the set of leases, as the lessor of every member learns it from apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseChange {
    /// A lease was granted.
    Granted {
        /// The lease.
        id: i64,
        /// Its TTL in seconds, as granted.
        ttl: i64,
    },
    /// A lease was revoked (by a client or its expiry).
    Revoked(i64),
    /// Every lease was replaced (a snapshot was installed): read the list again.
    Reloaded,
}

impl<E: Engine> StoreCore<E> {
    /// Opens the store on `engine`, checking the data format and rebuilding the index from
    /// the history records (see [`crate::backend::recovery`]).
    pub fn open(engine: E, config: StoreConfig) -> Result<Self, StoreError> {
        let Recovered { index, leases, current, compacted, applied, legacy_applied } = recover(&engine)?;
        if let Some(ids) = config.member {
            member::bind(&engine, ids)?;
        }
        let alarms = AlarmList::load(&engine)?;
        let auth = AuthState::load(&engine)?;
        let shared = Shared {
            alarms: RwLock::new(alarms.clone()),
            auth: RwLock::new(Arc::new(auth.clone())),
            tokens: Mutex::new(SimpleTokens::new(config.token_ttl)),
            db_size: AtomicU64::new(engine.size_bytes()),
            engine,
            index: RwLock::new(index),
            visible: AtomicI64::new(current),
            compacted: AtomicI64::new(compacted),
            applied_index: AtomicU64::new(applied.map_or(0, |a| a.index)),
        };
        Ok(Self {
            shared: Arc::new(shared),
            config,
            current,
            applied,
            legacy_applied,
            failed: None,
            leases,
            alarms,
            auth,
            lease_journal: None,
        })
    }

    /// Starts recording lease changes for a lessor; the state machine takes them with
    /// [`StoreCore::take_lease_changes`] after each applied batch.
    pub fn journal_leases(&mut self) {
        self.lease_journal.get_or_insert_with(Vec::new);
    }

    /// The lease changes applied since the last call (none if nothing records them).
    pub fn take_lease_changes(&mut self) -> Vec<LeaseChange> {
        self.lease_journal.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Rebuilds everything from the engine's records, as an open does: after a snapshot
    /// replaced them. Readers see the new state from the next read on.
    pub fn reload(&mut self) -> Result<(), StoreError> {
        let Recovered { index, leases, current, compacted, applied, legacy_applied } =
            recover(&self.shared.engine)?;
        let alarms = AlarmList::load(&self.shared.engine)?;
        let auth = AuthState::load(&self.shared.engine)?;
        *self.shared.write_index()? = index;
        self.publish_auth(auth.clone(), &[TokenChange::AllVoid])?;
        *self.shared.alarms.write().map_err(|_| StoreError::Stopped("alarm lock poisoned".into()))? =
            alarms.clone();
        self.shared.compacted.store(compacted, Ordering::Release);
        self.shared.applied_index.store(applied.map_or(0, |a| a.index), Ordering::Release);
        self.shared.db_size.store(self.shared.engine.size_bytes(), Ordering::Relaxed);
        self.shared.visible.store(current, Ordering::Release);
        (self.current, self.leases, self.applied, self.legacy_applied, self.alarms, self.auth) =
            (current, leases, applied, legacy_applied, alarms, auth);
        if let Some(journal) = self.lease_journal.as_mut() {
            journal.clear();
            journal.push(LeaseChange::Reloaded);
        }
        Ok(())
    }

    /// The engine, for records the store core does not own (the Raft state machine's).
    pub fn engine(&self) -> &E {
        &self.shared.engine
    }

    /// A handle for concurrent readers.
    pub fn read_view(&self) -> ReadView<E> {
        ReadView::new(Arc::clone(&self.shared))
    }

    /// The limits this writer enforces.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Why the writer stopped taking writes, if it did (fail-stop).
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Revision of the last applied command, durable or not.
    pub fn current_revision(&self) -> i64 {
        self.current
    }

    /// The active alarms as applied (durable at the next commit).
    pub fn alarms(&self) -> &AlarmList {
        &self.alarms
    }

    /// Applies one command into `batch`. Its changes become durable and visible at
    /// [`StoreCore::commit`]; its answer must not reach the client before that.
    pub fn apply(&mut self, command: &Command, batch: &mut Batch) -> Result<CommandResponse, StoreError> {
        if let Some(reason) = &self.failed {
            return Err(StoreError::Stopped(reason.clone()));
        }
        batch.commands += 1;
        let (caller, command) = command.caller();
        let anonymous;
        let caller = match caller {
            Some(caller) => caller,
            None => {
                anonymous = Caller::anonymous();
                &anonymous
            }
        };
        match command {
            Command::Put(req) => validate::check_put(req)?,
            Command::DeleteRange(req) => validate::check_delete(req)?,
            Command::Txn(req) => validate::check_txn(req, self.config.max_txn_ops)?,
            _ => {}
        }
        if command.encoded_len() > self.config.max_request_bytes {
            return Err(StoreError::RequestTooLarge);
        }
        self.alarms.gate(command)?;
        let leases = &self.leases;
        check_command(&self.auth, caller, command, &|id| leases.keys(id).unwrap_or_default())?;
        if let Some(answer) = self.apply_auth(caller, command, batch) {
            return answer;
        }
        match command {
            Command::Put(req) => {
                self.check_quota(KV_QUOTA_OVERHEAD + (req.key.len() + req.value.len()) as u64)?;
                self.in_txn(batch, |ctx| ctx.put(req)).map(CommandResponse::Put)
            }
            Command::DeleteRange(req) => {
                self.in_txn(batch, |ctx| ctx.delete(req)).map(CommandResponse::DeleteRange)
            }
            Command::Txn(req) => {
                metrics::counter!(crate::metric_names::ETCD_MVCC_TXN_TOTAL).increment(1);
                self.check_quota(txn_quota_cost(req))?;
                self.in_txn(batch, |ctx| {
                    let decision = txn::decide(ctx, req)?;
                    ctx.check_path(req, &decision)?;
                    ctx.check_fits_one_revision(req, &decision)?;
                    let mut resp = ctx.txn(req, &decision)?;
                    resp.header = Some(ResponseHeader { revision: ctx.read_rev(), ..Default::default() });
                    Ok(resp)
                })
                .map(CommandResponse::Txn)
            }
            Command::Compact(req) => self.compact(req, batch).map(CommandResponse::Compact),
            Command::LeaseGrant(req) => self.lease_grant(req, batch).map(CommandResponse::LeaseGrant),
            Command::LeaseRevoke(req) => self.lease_revoke(req, batch).map(CommandResponse::LeaseRevoke),
            Command::Alarm(req) => Ok(CommandResponse::Alarm(self.alarm(req, batch))),
            // Auth commands were applied above; a header inside a header never decodes.
            _ => Err(StoreError::Corrupt(format!("a command the writer cannot apply: {command:?}"))),
        }
    }

    /// Makes `auth` the state readers check against, and applies `tokens` to the simple tokens.
    fn publish_auth(&self, auth: AuthState, tokens: &[TokenChange]) -> Result<(), StoreError> {
        *self.shared.auth.write().map_err(|_| StoreError::Stopped("auth lock poisoned".into()))? =
            Arc::new(auth);
        self.change_tokens(tokens)
    }

    fn change_tokens(&self, changes: &[TokenChange]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut tokens =
            self.shared.tokens.lock().map_err(|_| StoreError::Stopped("token lock poisoned".into()))?;
        let now = Instant::now();
        for change in changes {
            match change {
                TokenChange::Issued { token, user } => tokens.add(token.clone(), user.clone(), now),
                TokenChange::UserVoid(user) => tokens.forget_user(user),
                TokenChange::AllVoid => tokens.clear(),
            }
        }
        Ok(())
    }

    /// Raises or clears an alarm; readers see the new list with the batch.
    fn alarm(&mut self, req: &AlarmRequest, batch: &mut Batch) -> AlarmResponse {
        let alarms = self.alarms.apply(req, &mut batch.writes);
        batch.alarms = Some(self.alarms.clone());
        AlarmResponse {
            header: Some(ResponseHeader { revision: self.current, ..Default::default() }),
            alarms,
        }
    }

    /// The log index of the last entry applied (0 before the first): the next batch is that of
    /// the entry after it.
    pub fn applied_index(&self) -> u64 {
        self.applied.map_or(0, |a| a.index)
    }

    /// The last log entry applied, as the one record of it says.
    pub fn applied_position(&self) -> Option<AppliedPosition> {
        self.applied
    }

    /// Writes `batch`, the changes of Raft log entries up to the one at `position` that the log
    /// already holds durably, without an fsync of its own (a restart replays what a crash lost),
    /// then makes it visible. The batch may hold no command (a blank or membership entry): the
    /// applied position is written all the same, in the batch, so the two never disagree.
    pub fn commit_by_log(
        &mut self,
        mut batch: Batch,
        position: impl Into<AppliedPosition>,
    ) -> Result<CommittedEvents, StoreError> {
        let position = position.into();
        self.applied = Some(position);
        if let Some(reason) = &self.failed {
            return Err(StoreError::Stopped(reason.clone()));
        }
        let prev_revision = self.shared.visible.load(Ordering::Acquire);
        batch.writes.put(Family::Meta, APPLIED_KEY.to_vec(), codec::encode_applied(&position));
        if std::mem::take(&mut self.legacy_applied) {
            batch.writes.delete(Family::Meta, LEGACY_APPLIED_INDEX_KEY.to_vec());
        }
        if let Err(err) = self.shared.engine.commit_by_log(&batch.writes) {
            // The batch may or may not be on disk (a failed fsync says nothing about what the
            // disk kept), so its writes are answered as etcd's stopping server answers them:
            // unavailable, outcome unknown, never acknowledged.
            let reason = format!("commit failed: {err}");
            self.failed = Some(reason.clone());
            return Err(StoreError::Stopped(reason));
        }
        if let Some(revision) = batch.compaction {
            self.finish_compaction(revision)?;
        }
        if let Some(alarms) = batch.alarms {
            *self.shared.alarms.write().map_err(|_| StoreError::Stopped("alarm lock poisoned".into()))? =
                alarms;
        }
        match batch.auth {
            Some(auth) => self.publish_auth(auth, &batch.tokens)?,
            None => self.change_tokens(&batch.tokens)?,
        }
        self.shared.db_size.store(self.shared.engine.size_bytes(), Ordering::Relaxed);
        self.shared.applied_index.store(position.index, Ordering::Release);
        self.shared.visible.store(self.current, Ordering::Release);
        Ok(CommittedEvents { prev_revision, revision: self.current, events: batch.events })
    }

    /// Makes a durable compaction visible: raises the compaction revision (before the index
    /// changes, so overtaken reads notice), drops the compacted revisions from the index and
    /// deletes their history. A crash before those deletes are on disk leaves records that
    /// the next open deletes.
    fn finish_compaction(&mut self, revision: i64) -> Result<(), StoreError> {
        self.shared.compacted.store(revision, Ordering::Release);
        let removed = self.shared.write_index()?.compact(revision);
        let mut deletes = WriteSet::default();
        for rev in removed {
            deletes.delete(Family::History, rev.to_key_bytes().to_vec());
        }
        if deletes.is_empty() {
            return Ok(());
        }
        if let Err(err) = self.shared.engine.commit(&deletes) {
            let reason = format!("commit failed: {err}");
            self.failed = Some(reason.clone());
            return Err(StoreError::Stopped(reason));
        }
        Ok(())
    }

    /// The compaction revision commands of `batch` see: a compaction earlier in the batch
    /// counts, though readers outside the writer do not see it before the commit.
    fn compacted_for(&self, batch: &Batch) -> i64 {
        self.shared.compacted.load(Ordering::Acquire).max(batch.compaction.unwrap_or(0))
    }

    fn check_quota(&self, cost: u64) -> Result<(), StoreError> {
        if self.shared.db_size.load(Ordering::Relaxed) + cost > self.config.quota_bytes {
            return Err(StoreError::NoSpace);
        }
        Ok(())
    }

    pub(crate) fn in_txn<T>(
        &mut self,
        batch: &mut Batch,
        body: impl FnOnce(&mut WriteTxn<'_, E>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let compacted = self.compacted_for(batch);
        let shared = Arc::clone(&self.shared);
        let mut index = shared.write_index()?;
        let mut ctx = WriteTxn {
            index: &mut index,
            leases: &mut self.leases,
            engine: &shared.engine,
            batch,
            begin: self.current,
            compacted,
            changes: 0,
        };
        let result = body(&mut ctx);
        let changed = ctx.changes > 0;
        if result.is_err() && changed {
            // Commands are checked before they change anything; a failure after a change
            // would leave a half-applied command in the index.
            self.failed = Some("a command failed after changing the store".into());
        }
        if changed {
            self.current += 1;
        }
        result
    }

    fn compact(
        &mut self,
        req: &CompactionRequest,
        batch: &mut Batch,
    ) -> Result<CompactionResponse, StoreError> {
        if req.revision <= self.compacted_for(batch) {
            return Err(StoreError::Compacted);
        }
        if req.revision > self.current {
            return Err(StoreError::FutureRevision);
        }
        // Applied at the commit, once this record is durable (see `finish_compaction`).
        batch.compaction = Some(req.revision);
        batch.writes.put(Family::Meta, COMPACTED_KEY.to_vec(), codec::encode_i64(req.revision));
        Ok(CompactionResponse {
            header: Some(ResponseHeader { revision: self.current, ..Default::default() }),
        })
    }
}

/// etcd's quota cost of a txn: the bigger of its two branches' puts.
fn txn_quota_cost(txn: &TxnRequest) -> u64 {
    use actcd_proto::etcdserverpb::request_op::Request;
    fn branch_cost(ops: &[actcd_proto::etcdserverpb::RequestOp]) -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(Request::RequestPut(p)) => KV_QUOTA_OVERHEAD + (p.key.len() + p.value.len()) as u64,
                Some(Request::RequestTxn(t)) => txn_quota_cost(t),
                _ => 0,
            })
            .sum()
    }
    branch_cost(&txn.success).max(branch_cost(&txn.failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryEngine;
    use crate::mvcc::revision::Revision;
    use actcd_proto::etcdserverpb::{
        request_op, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest, RequestOp,
    };
    use bytes::Bytes;

    fn store() -> StoreCore<MemoryEngine> {
        StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("an empty store opens")
    }

    /// Changes that do not fit one revision (`Revision::MAX_SUB` + 1) used to run out half way
    /// and stop the writer: a delete of more keys, a txn whose put came before such a delete, a
    /// revoke of a lease with more keys. Each is refused before it changes anything (a lease
    /// takes no more keys than its revoke can delete), and the writer goes on.
    #[test]
    fn changes_that_do_not_fit_one_revision_are_refused_whole() {
        let mut core = store();
        let limit = Revision::MAX_SUB as usize + 1;
        let mut batch = Batch::default();
        let grant = LeaseGrantRequest { id: 7, ttl: 1000 };
        core.apply(&Command::LeaseGrant(grant), &mut batch).expect("grant");
        let key = |i: usize| -> Bytes { format!("k{i:07}").into() };
        for i in 0..limit {
            let put = PutRequest { key: key(i), lease: 7, ..Default::default() };
            core.apply(&Command::Put(put), &mut batch).expect("put");
            if i % 8192 == 0 {
                core.commit_by_log(std::mem::take(&mut batch), core.applied_index() + 1).expect("commit");
            }
        }
        let one_more = PutRequest { key: key(limit), lease: 7, ..Default::default() };
        assert_eq!(core.apply(&Command::Put(one_more.clone()), &mut batch), Err(StoreError::TooManyChanges));
        let again = PutRequest { key: key(0), value: "v".into(), lease: 7, ..Default::default() };
        core.apply(&Command::Put(again), &mut batch).expect("a key the lease holds may be put again");
        let unleased = PutRequest { lease: 0, ..one_more };
        core.apply(&Command::Put(unleased), &mut batch).expect("the same key without the lease");
        core.commit_by_log(batch, core.applied_index() + 1).expect("commit");

        let revision = core.current_revision();
        let all = DeleteRangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
        let mut batch = Batch::default();
        assert_eq!(
            core.apply(&Command::DeleteRange(all.clone()), &mut batch),
            Err(StoreError::TooManyChanges)
        );
        let op = |request| RequestOp { request: Some(request) };
        let put_then_delete = TxnRequest {
            success: vec![
                op(request_op::Request::RequestPut(PutRequest { key: "a".into(), ..Default::default() })),
                op(request_op::Request::RequestDeleteRange(all)),
            ],
            ..Default::default()
        };
        let refused = core.apply(&Command::Txn(put_then_delete), &mut batch);
        assert_eq!(refused, Err(StoreError::TooManyChanges));
        assert_eq!(core.current_revision(), revision);

        let revoke = LeaseRevokeRequest { id: 7 };
        core.apply(&Command::LeaseRevoke(revoke), &mut batch)
            .expect("a full lease is revoked in one revision");
        assert_eq!(core.current_revision(), revision + 1);
        let some = DeleteRangeRequest { key: "k".into(), range_end: "l".into(), ..Default::default() };
        let deleted = core.apply(&Command::DeleteRange(some), &mut batch).expect("the writer goes on");
        assert!(matches!(deleted, CommandResponse::DeleteRange(d) if d.deleted == 1));
        core.commit_by_log(batch, core.applied_index() + 1).expect("commit");
    }
}
