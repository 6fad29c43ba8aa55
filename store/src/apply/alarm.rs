//! Alarms (etcd's alarm store): which member raised which alarm, and the writes each active
//! alarm refuses. The list is state machine state like any key: an Alarm command changes it,
//! inside the batch that makes it durable (the meta record [`ALARMS_KEY`]), and readers see the
//! change with that batch, never before.
//!
//! - NOSPACE (raised when a write finds the store over `--quota-backend-bytes`): puts, txns
//!   that put, and lease grants are refused; reads, deletes and compaction still go through,
//!   so an operator can make room, defragment and disarm.
//! - CORRUPT: the KV and lease writes (put, delete, txn, compaction, lease grant and revoke)
//!   are refused; alarms and auth commands still apply, as etcd's corrupt applier overrides
//!   only those six and passes the rest through (so the alarm can be disarmed, and an
//!   operator can still manage users while the data is in doubt).

use actcd_proto::etcdserverpb::alarm_request::AlarmAction;
use actcd_proto::etcdserverpb::{
    request_op::Request, AlarmMember, AlarmRequest, AlarmType, RequestOp, TxnRequest,
};

use crate::apply::command::Command;
use crate::backend::engine::{Engine, Family, WriteSet};
use crate::error::StoreError;

/// The meta record holding the active alarms: 12 bytes each, member id (u64 BE) then alarm
/// type (i32 BE), sorted by (member, type).
pub const ALARMS_KEY: &[u8] = b"alarms";

/// The active alarms, sorted by (member, type).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlarmList(Vec<AlarmMember>);

impl AlarmList {
    /// The alarms stored in `engine` (none in a new store).
    pub fn load(engine: &impl Engine) -> Result<Self, StoreError> {
        match engine.get(Family::Meta, ALARMS_KEY)? {
            Some(bytes) => decode(&bytes).map(Self),
            None => Ok(Self::default()),
        }
    }

    /// The active alarms of type `alarm`, or all of them for [`AlarmType::None`].
    pub fn list(&self, alarm: AlarmType) -> Vec<AlarmMember> {
        self.0.iter().filter(|a| alarm == AlarmType::None || a.alarm == alarm as i32).cloned().collect()
    }

    /// True while some member has raised `alarm`.
    pub fn has(&self, alarm: AlarmType) -> bool {
        self.0.iter().any(|a| a.alarm == alarm as i32)
    }

    /// Refuses `command` if an active alarm forbids it: [`StoreError::CorruptAlarm`] for a KV
    /// or lease write under CORRUPT, [`StoreError::NoSpace`] for one that adds data under
    /// NOSPACE.
    pub fn gate(&self, command: &Command) -> Result<(), StoreError> {
        let kv_or_lease = matches!(
            command,
            Command::Put(_)
                | Command::DeleteRange(_)
                | Command::Txn(_)
                | Command::Compact(_)
                | Command::LeaseGrant(_)
                | Command::LeaseRevoke(_)
        );
        if kv_or_lease && self.has(AlarmType::Corrupt) {
            return Err(StoreError::CorruptAlarm);
        }
        let adds_data = match command {
            Command::Put(_) | Command::LeaseGrant(_) => true,
            Command::Txn(txn) => txn_puts(txn),
            _ => false,
        };
        if adds_data && self.has(AlarmType::Nospace) {
            return Err(StoreError::NoSpace);
        }
        Ok(())
    }

    /// Applies an Alarm request as etcd's alarm store does, recording a change in `writes`;
    /// answers the alarms it raised, cleared or (for GET) lists. An unknown action changes
    /// nothing and answers nothing; raising [`AlarmType::None`] does nothing.
    pub fn apply(&mut self, req: &AlarmRequest, writes: &mut WriteSet) -> Vec<AlarmMember> {
        // etcd's alarm store knows no other types; an unknown one matches nothing.
        let alarm = AlarmType::try_from(req.alarm).unwrap_or(AlarmType::None);
        let member = AlarmMember { member_id: req.member_id, alarm: alarm as i32 };
        match AlarmAction::try_from(req.action) {
            Ok(AlarmAction::Get) => self.list(alarm),
            Ok(AlarmAction::Activate) if alarm == AlarmType::None => Vec::new(),
            Ok(AlarmAction::Activate) => {
                if let Err(at) = self.0.binary_search_by_key(&(member.member_id, member.alarm), key) {
                    self.0.insert(at, member);
                    self.record(writes);
                }
                vec![member]
            }
            Ok(AlarmAction::Deactivate) => {
                match self.0.binary_search_by_key(&(member.member_id, member.alarm), key) {
                    Ok(at) => {
                        self.0.remove(at);
                        self.record(writes);
                        vec![member]
                    }
                    Err(_) => Vec::new(),
                }
            }
            Err(_) => Vec::new(),
        }
    }

    fn record(&self, writes: &mut WriteSet) {
        if self.0.is_empty() {
            writes.delete(Family::Meta, ALARMS_KEY.to_vec());
        } else {
            writes.put(Family::Meta, ALARMS_KEY.to_vec(), encode(&self.0));
        }
    }
}

fn key(a: &AlarmMember) -> (u64, i32) {
    (a.member_id, a.alarm)
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
    let mut active: Vec<AlarmMember> = bytes
        .chunks_exact(12)
        .map(|c| {
            let (id, alarm) = c.split_at(8);
            let mut id_bytes = [0u8; 8];
            id_bytes.copy_from_slice(id);
            let mut alarm_bytes = [0u8; 4];
            alarm_bytes.copy_from_slice(alarm);
            AlarmMember { member_id: u64::from_be_bytes(id_bytes), alarm: i32::from_be_bytes(alarm_bytes) }
        })
        .collect();
    // Sorted on the way in, so a record written by an older actcd (sorted too) or edited by
    // hand still gives a list the binary searches can use.
    active.sort_by_key(key);
    active.dedup();
    Ok(active)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{
        AuthEnableRequest, AuthRoleAddRequest, CompactionRequest, DeleteRangeRequest, LeaseGrantRequest,
        LeaseRevokeRequest, PutRequest,
    };

    fn request(action: AlarmAction, member_id: u64, alarm: AlarmType) -> AlarmRequest {
        AlarmRequest { action: action as i32, member_id, alarm: alarm as i32 }
    }

    #[test]
    fn alarms_gate_the_writes_that_add_data_and_corrupt_gates_kv_and_lease_writes() {
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
        let grant = Command::LeaseGrant(LeaseGrantRequest { ttl: 10, id: 1 });
        let disarm = Command::Alarm(request(AlarmAction::Deactivate, 7, AlarmType::Nospace));

        let mut alarms = AlarmList::default();
        let mut writes = WriteSet::default();
        assert_eq!(alarms.gate(&put), Ok(()));
        assert_eq!(alarms.apply(&request(AlarmAction::Activate, 7, AlarmType::None), &mut writes), vec![]);
        assert!(writes.is_empty(), "raising NONE changes nothing");
        let raised = alarms.apply(&request(AlarmAction::Activate, 7, AlarmType::Nospace), &mut writes);
        assert_eq!(raised, vec![AlarmMember { member_id: 7, alarm: AlarmType::Nospace as i32 }]);
        assert_eq!(alarms.gate(&put), Err(StoreError::NoSpace));
        assert_eq!(alarms.gate(&Command::Txn(nested)), Err(StoreError::NoSpace));
        assert_eq!(alarms.gate(&grant), Err(StoreError::NoSpace));
        assert_eq!(alarms.gate(&delete), Ok(()));
        assert_eq!(alarms.gate(&Command::Txn(TxnRequest::default())), Ok(()));
        assert_eq!(
            alarms.apply(&request(AlarmAction::Deactivate, 8, AlarmType::Nospace), &mut writes),
            vec![]
        );

        alarms.apply(&request(AlarmAction::Activate, 3, AlarmType::Corrupt), &mut writes);
        assert_eq!(alarms.gate(&delete), Err(StoreError::CorruptAlarm));
        assert_eq!(alarms.gate(&disarm), Ok(()), "an alarm can always be disarmed");
        let revoke = Command::LeaseRevoke(LeaseRevokeRequest { id: 1 });
        let compact = Command::Compact(CompactionRequest { revision: 1, physical: false });
        for refused in [&put, &grant, &revoke, &compact] {
            assert_eq!(alarms.gate(refused), Err(StoreError::CorruptAlarm), "{refused:?}");
        }
        let role = Command::RoleAdd(AuthRoleAddRequest { name: "r".into() });
        let enable = Command::AuthEnable(AuthEnableRequest {});
        for passed in [&role, &enable] {
            assert_eq!(alarms.gate(passed), Ok(()), "etcd's corrupt applier passes {passed:?}");
        }
        let listed: Vec<u64> = alarms.list(AlarmType::None).iter().map(|a| a.member_id).collect();
        assert_eq!(listed, [3, 7], "sorted by member");
        assert_eq!(alarms.list(AlarmType::Corrupt).len(), 1);
        assert_eq!(alarms.apply(&request(AlarmAction::Get, 0, AlarmType::Nospace), &mut writes).len(), 1);
    }

    #[test]
    fn the_record_round_trips_and_a_torn_one_is_corrupt() {
        let mut alarms = AlarmList::default();
        let mut writes = WriteSet::default();
        alarms.apply(&request(AlarmAction::Activate, 9, AlarmType::Nospace), &mut writes);
        alarms.apply(&request(AlarmAction::Activate, 2, AlarmType::Corrupt), &mut writes);
        assert_eq!(decode(&encode(&alarms.0)).map(AlarmList), Ok(alarms.clone()));
        assert!(matches!(decode(&[0; 13]), Err(StoreError::Corrupt(_))));
    }
}
