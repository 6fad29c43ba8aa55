//! Alarms (etcd's alarm store): which member raised which alarm, kept in the meta column
//! family so that they survive a restart, and the writes each active alarm refuses.
//!
//! - NOSPACE (raised when a write finds the store over `--quota-backend-bytes`): puts, txns
//!   that put, and lease grants are refused; reads, deletes and compaction still go through,
//!   so an operator can make room, defragment and disarm.
//! - CORRUPT: every write is refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use actcd_proto::etcdserverpb::{request_op::Request, AlarmMember, AlarmType, RequestOp, TxnRequest};

use super::command::Command;
use super::engine::{Engine, Family, WriteSet};
use super::error::StoreError;

/// The meta record holding the active alarms: 12 bytes each, member id (u64 BE) then alarm
/// type (i32 BE).
pub const ALARMS_KEY: &[u8] = b"alarms";

/// The active alarms of this member's store.
pub struct Alarms<E> {
    engine: E,
    active: Mutex<Vec<AlarmMember>>,
    nospace: AtomicBool,
    corrupt: AtomicBool,
}

impl<E: Engine> Alarms<E> {
    /// Loads the alarms stored in `engine` (none in a new store).
    pub fn load(engine: E) -> Result<Self, StoreError> {
        let active = match engine.get(Family::Meta, ALARMS_KEY)? {
            Some(bytes) => decode(&bytes)?,
            None => Vec::new(),
        };
        let alarms = Self {
            engine,
            active: Mutex::new(Vec::new()),
            nospace: AtomicBool::new(false),
            corrupt: AtomicBool::new(false),
        };
        alarms.publish(&active);
        *alarms.lock()? = active;
        Ok(alarms)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Vec<AlarmMember>>, StoreError> {
        self.active.lock().map_err(|_| StoreError::Stopped("alarm lock poisoned".into()))
    }

    fn publish(&self, active: &[AlarmMember]) {
        let has = |t: AlarmType| active.iter().any(|a| a.alarm == t as i32);
        self.nospace.store(has(AlarmType::Nospace), Ordering::Release);
        self.corrupt.store(has(AlarmType::Corrupt), Ordering::Release);
    }

    fn store(&self, active: &[AlarmMember]) -> Result<(), StoreError> {
        let mut set = WriteSet::default();
        if active.is_empty() {
            set.delete(Family::Meta, ALARMS_KEY.to_vec());
        } else {
            set.put(Family::Meta, ALARMS_KEY.to_vec(), encode(active));
        }
        self.engine.commit(&set)
    }

    /// The active alarms of type `alarm`, or all of them for [`AlarmType::None`].
    pub fn list(&self, alarm: AlarmType) -> Result<Vec<AlarmMember>, StoreError> {
        let active = self.lock()?;
        Ok(active.iter().filter(|a| alarm == AlarmType::None || a.alarm == alarm as i32).cloned().collect())
    }

    /// Raises `alarm` for `member_id` (durably) and answers it, or the same alarm already
    /// raised; nothing for [`AlarmType::None`].
    pub fn activate(&self, member_id: u64, alarm: AlarmType) -> Result<Option<AlarmMember>, StoreError> {
        if alarm == AlarmType::None {
            return Ok(None);
        }
        let member = AlarmMember { member_id, alarm: alarm as i32 };
        let mut active = self.lock()?;
        if active.contains(&member) {
            return Ok(Some(member));
        }
        let mut next = active.clone();
        next.push(member);
        next.sort_by_key(|a| (a.member_id, a.alarm));
        self.store(&next)?;
        self.publish(&next);
        *active = next;
        Ok(Some(member))
    }

    /// Clears `alarm` of `member_id` (durably) and answers it, or nothing if it was not raised.
    pub fn deactivate(&self, member_id: u64, alarm: AlarmType) -> Result<Option<AlarmMember>, StoreError> {
        let member = AlarmMember { member_id, alarm: alarm as i32 };
        let mut active = self.lock()?;
        if !active.contains(&member) {
            return Ok(None);
        }
        let next: Vec<_> = active.iter().filter(|a| **a != member).cloned().collect();
        self.store(&next)?;
        self.publish(&next);
        *active = next;
        Ok(Some(member))
    }

    /// True while a NOSPACE alarm is raised.
    pub fn no_space(&self) -> bool {
        self.nospace.load(Ordering::Acquire)
    }

    /// Refuses `command` if an active alarm forbids it: [`StoreError::CorruptAlarm`] for any
    /// write under CORRUPT, [`StoreError::NoSpace`] for one that adds data under NOSPACE.
    pub fn check(&self, command: &Command) -> Result<(), StoreError> {
        if self.corrupt.load(Ordering::Acquire) {
            return Err(StoreError::CorruptAlarm);
        }
        if !self.no_space() {
            return Ok(());
        }
        let adds_data = match command {
            Command::Put(_) | Command::LeaseGrant(_) => true,
            Command::Txn(txn) => txn_puts(txn),
            _ => false,
        };
        if adds_data {
            return Err(StoreError::NoSpace);
        }
        Ok(())
    }
}

/// Whether either branch of `txn` (or of a txn nested in it) puts.
fn txn_puts(txn: &TxnRequest) -> bool {
    fn branch(ops: &[RequestOp]) -> bool {
        ops.iter().any(|op| match &op.request {
            Some(Request::RequestPut(_)) => true,
            Some(Request::RequestTxn(t)) => txn_puts(t),
            _ => false,
        })
    }
    branch(&txn.success) || branch(&txn.failure)
}

fn encode(active: &[AlarmMember]) -> Vec<u8> {
    let mut out = Vec::with_capacity(active.len() * 12);
    for a in active {
        out.extend_from_slice(&a.member_id.to_be_bytes());
        out.extend_from_slice(&a.alarm.to_be_bytes());
    }
    out
}

fn decode(bytes: &[u8]) -> Result<Vec<AlarmMember>, StoreError> {
    if bytes.len() % 12 != 0 {
        return Err(StoreError::Corrupt(format!("alarm record of {} bytes", bytes.len())));
    }
    Ok(bytes
        .chunks_exact(12)
        .map(|c| {
            let (id, alarm) = c.split_at(8);
            let mut id_bytes = [0u8; 8];
            id_bytes.copy_from_slice(id);
            let mut alarm_bytes = [0u8; 4];
            alarm_bytes.copy_from_slice(alarm);
            AlarmMember { member_id: u64::from_be_bytes(id_bytes), alarm: i32::from_be_bytes(alarm_bytes) }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mvcc::rocks::RocksEngine;
    use actcd_proto::etcdserverpb::{DeleteRangeRequest, LeaseGrantRequest, PutRequest, RequestOp};

    #[test]
    fn alarms_persist_and_gate_writes_that_add_data() {
        let dir = tempfile::tempdir().expect("dir");
        let put = Command::Put(PutRequest { key: "k".into(), ..Default::default() });
        let delete = Command::DeleteRange(DeleteRangeRequest { key: "k".into(), ..Default::default() });
        let put_op = RequestOp {
            request: Some(Request::RequestPut(PutRequest { key: "k".into(), ..Default::default() })),
        };
        let nested = TxnRequest {
            failure: vec![RequestOp {
                request: Some(Request::RequestTxn(TxnRequest {
                    success: vec![put_op],
                    ..Default::default()
                })),
            }],
            ..Default::default()
        };
        let read_txn = Command::Txn(TxnRequest::default());
        {
            let alarms = Alarms::load(RocksEngine::open(dir.path()).expect("engine")).expect("alarms");
            assert_eq!(alarms.check(&put), Ok(()));
            assert_eq!(alarms.activate(7, AlarmType::None), Ok(None));
            let raised = alarms.activate(7, AlarmType::Nospace).expect("activate");
            assert_eq!(raised, Some(AlarmMember { member_id: 7, alarm: AlarmType::Nospace as i32 }));
            assert_eq!(alarms.activate(7, AlarmType::Nospace), Ok(raised));
            assert_eq!(alarms.check(&put), Err(StoreError::NoSpace));
            assert_eq!(alarms.check(&Command::Txn(nested.clone())), Err(StoreError::NoSpace));
            assert_eq!(alarms.check(&delete), Ok(()));
            assert_eq!(alarms.check(&read_txn), Ok(()));
            let grant = Command::LeaseGrant(LeaseGrantRequest { ttl: 10, id: 1 });
            assert_eq!(alarms.check(&grant), Err(StoreError::NoSpace));
            assert_eq!(alarms.deactivate(8, AlarmType::Nospace), Ok(None));
        }
        let alarms = Alarms::load(RocksEngine::open(dir.path()).expect("engine")).expect("alarms");
        assert_eq!(alarms.list(AlarmType::None).expect("list").len(), 1, "survives a restart");
        assert!(alarms.no_space());
        assert_eq!(alarms.list(AlarmType::Corrupt).expect("list"), vec![]);
        assert!(alarms.deactivate(7, AlarmType::Nospace).expect("deactivate").is_some());
        assert_eq!(alarms.check(&put), Ok(()));
        alarms.activate(7, AlarmType::Corrupt).expect("activate");
        assert_eq!(alarms.check(&delete), Err(StoreError::CorruptAlarm));
    }
}
