//! What the group's tests share: a store on the in-memory engine (what is under test is the
//! group, not the disk), fake stream buffers, and watch and put shorthands.

use std::collections::HashMap;

use actcd_proto::etcdserverpb::PutRequest;
use actcd_proto::watch_reply::WatchReply;
use bytes::Bytes;

use crate::watch::messages::{StreamId, WatchSpec};
use actcd_store::backend::memory::MemoryEngine;
use actcd_store::{Batch, Command, CommittedEvents, ReadView, StoreConfig, StoreCore};

use super::group::revision_of;
use super::outbox::{Delivery, Outbox};
use super::WatcherGroup;

/// A fake set of stream buffers: each holds at most `capacity` deliveries.
pub struct Buffers {
    capacity: usize,
    pub got: HashMap<StreamId, Vec<Vec<WatchReply>>>,
}

impl Outbox for Buffers {
    fn deliver(&mut self, stream: StreamId, responses: Vec<WatchReply>) -> Delivery {
        let queue = self.got.entry(stream).or_default();
        if queue.len() >= self.capacity {
            return Delivery::Full;
        }
        queue.push(responses);
        Delivery::Sent
    }
}

impl Buffers {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, got: HashMap::new() }
    }
    /// Drains a stream's buffer: (watch id, revisions of its events) per response.
    pub fn drain(&mut self, stream: StreamId) -> Vec<(i64, Vec<i64>)> {
        self.got
            .remove(&stream)
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .map(|r| {
                (r.watch_id, r.events.iter().map(|e| revision_of(&e.decode().expect("an event"))).collect())
            })
            .collect()
    }
}

pub struct Fixture {
    pub store: StoreCore<MemoryEngine>,
}

impl Fixture {
    pub fn new() -> Self {
        let store = StoreCore::open(MemoryEngine::new(), StoreConfig::default()).expect("store");
        Self { store }
    }
    pub fn commit(&mut self, commands: Vec<Command>) -> CommittedEvents {
        let mut batch = Batch::default();
        for c in &commands {
            self.store.apply(c, &mut batch).expect("apply");
        }
        self.store.commit_by_log(batch, self.store.applied_index() + 1).expect("commit")
    }
    pub fn put(&mut self, key: &'static str, value: &'static str) -> CommittedEvents {
        self.commit(vec![put(key, value)])
    }
    /// The store's read view, and a group that has seen every revision up to it, with `first`
    /// its one watch.
    pub fn watching(&self, first: &WatchSpec) -> (ReadView<MemoryEngine>, WatcherGroup) {
        let view = self.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        group.add(first);
        (view, group)
    }
}

pub fn put(key: &'static str, value: &'static str) -> Command {
    Command::Put(PutRequest {
        key: Bytes::from_static(key.as_bytes()),
        value: Bytes::from_static(value.as_bytes()),
        ..Default::default()
    })
}

pub fn spec(stream: StreamId, watch_id: i64, key: &'static str, end: &'static str, start: i64) -> WatchSpec {
    WatchSpec {
        stream,
        watch_id,
        key: Bytes::from_static(key.as_bytes()),
        range_end: Bytes::from_static(end.as_bytes()),
        start_revision: start,
        prev_kv: false,
        no_put: false,
        no_delete: false,
        progress_notify: false,
    }
}
