//! Request validation on decoded requests: the first byte picks the message type, the rest is
//! decoded as protobuf (as the gRPC layer would) or, for a txn, built by the generators. No
//! check may panic, a decoded message re-encoded and decoded again must get the same verdict,
//! and a txn the checks accept must really have no key put twice in one branch.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use prost::Message;

use actcd_store::mvcc::txn;
use actcd_store::apply::validate::{check_delete, check_put, check_range, check_txn};
use actcd_store::StoreError;
use actcd_proto::etcdserverpb::{request_op, DeleteRangeRequest, PutRequest, RangeRequest, TxnRequest};

/// etcd's default --max-txn-ops.
const MAX_TXN_OPS: usize = 128;

fn verdict<M: Message + Default>(bytes: &[u8], check: impl Fn(&M) -> Result<(), StoreError>) {
    let Ok(msg) = M::decode(bytes) else { return };
    let first = check(&msg);
    let again = M::decode(msg.encode_to_vec().as_slice()).expect("a message prost encoded decodes");
    assert_eq!(check(&again), first, "re-encoding changed the verdict");
}

fn check_txn_verdict(req: &TxnRequest) -> Result<(), StoreError> {
    let verdict = check_txn(req, MAX_TXN_OPS);
    let _ = txn::is_read_only(req);
    if verdict.is_ok() {
        for branch in [&req.success, &req.failure] {
            let mut seen = HashSet::new();
            for op in branch {
                if let Some(request_op::Request::RequestPut(p)) = &op.request {
                    assert!(!p.key.is_empty(), "accepted a put of the empty key");
                    assert!(seen.insert(p.key.clone()), "accepted a branch putting {:?} twice", p.key);
                }
            }
        }
    }
    verdict
}

fuzz_target!(|data: &[u8]| {
    let Some((kind, body)) = data.split_first() else { return };
    match kind % 5 {
        0 => verdict::<RangeRequest>(body, check_range),
        1 => verdict::<PutRequest>(body, check_put),
        2 => verdict::<DeleteRangeRequest>(body, check_delete),
        3 => verdict::<TxnRequest>(body, check_txn_verdict),
        _ => {
            let mut u = Unstructured::new(body);
            if let Ok(req) = actcd_fuzz::txn(&mut u, 1, 0) {
                let _ = check_txn_verdict(&req);
            }
        }
    }
});
