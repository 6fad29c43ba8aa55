//! Waiting for the keys ahead of one's own to go: etcd's waitDeletes. The newest key under the
//! prefix created at or before `max_create_revision` is watched until it is deleted, then the
//! next one, until none is left; the last Range's header is the answer. Watching only the key
//! just ahead (not all of them) is what keeps a queue of N waiters from waking N at each turn.

use actcd_proto::errors::EtcdError;
use actcd_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use actcd_proto::etcdserverpb::{RangeRequest, ResponseHeader, TxnRequest, WatchCreateRequest};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;
use futures::StreamExt;
use tonic::Status;

use super::local::Local;

/// Waits until no key under `prefix` has a create revision of `max_create_revision` or less.
pub async fn wait_deletes(
    local: &Local,
    prefix: &[u8],
    max_create_revision: i64,
) -> Result<ResponseHeader, Status> {
    loop {
        // clientv3's WithLastCreate and WithMaxCreateRev.
        let newest_ahead = RangeRequest {
            key: prefix.to_vec().into(),
            range_end: prefix_end(prefix).into(),
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Create as i32,
            limit: 1,
            max_create_revision,
            ..Default::default()
        };
        let answer = local.range(newest_ahead).await?;
        let header = super::header(answer.header);
        let Some(ahead) = answer.kvs.first() else { return Ok(header) };
        wait_delete(local, &ahead.key, header.revision).await?;
    }
}

/// Waits until `key`, which exists at `revision`, is deleted.
pub async fn wait_delete(local: &Local, key: &[u8], revision: i64) -> Result<(), Status> {
    let create =
        WatchCreateRequest { key: key.to_vec().into(), start_revision: revision, ..Default::default() };
    let mut responses = local.watch(create)?;
    while let Some(response) = responses.next().await {
        let response = response?;
        if response.compact_revision != 0 {
            return Err(EtcdError::Compacted.status());
        }
        if response.canceled {
            return Err(Status::failed_precondition(response.cancel_reason));
        }
        if response.events.iter().any(|e| e.r#type == EventType::Delete as i32) {
            return Ok(());
        }
    }
    Err(Status::unknown("lost watcher waiting for delete"))
}

/// Undoes a waiter's put if its wait does not finish: dropped armed (the client went away
/// mid-wait, so the handler's future was dropped) or after a failed wait. clientv3 does the
/// same, so that a waiter who gave up does not come to hold a lock or lead with nobody left
/// to release it.
pub struct Abandon {
    local: Local,
    undo: Option<TxnRequest>,
}

impl Abandon {
    /// Runs `undo` with `local`'s rights unless disarmed.
    pub fn new(local: &Local, undo: TxnRequest) -> Self {
        Self { local: local.clone(), undo: Some(undo) }
    }

    /// The wait succeeded: the key stays.
    pub fn disarm(mut self) {
        self.undo = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        let local = self.local.clone();
        // On the runtime, because a drop cannot wait; if it fails the key goes with its lease.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(status) = local.txn(undo).await {
                    tracing::debug!(%status, "could not undo an abandoned wait");
                }
            });
        }
    }
}
