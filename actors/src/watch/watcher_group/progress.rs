//! Progress notifications: a WatchProgressRequest answered once every watcher of its stream is
//! synced, and the periodic tick that tells idle watchers the current revision.

use std::collections::HashMap;

use actcd_proto::etcdserverpb::WatchResponse;

use crate::watch::messages::StreamId;
use crate::watch::watcher::flags;

use super::group::{header, WatcherGroup};
use super::outbox::{Delivery, Outbox};

impl WatcherGroup {
    /// Answers a WatchProgressRequest: only when every watcher of the stream is synced, with
    /// watch_id -1 at `processed`, ordered after everything already sent (etcd drops the request
    /// otherwise; the client asks again).
    pub fn request_progress(&mut self, stream: StreamId, outbox: &mut impl Outbox) {
        let Some(slots) = self.streams.get(&stream) else { return };
        let all_synced = slots.iter().all(|s| self.slots.get(*s).is_some_and(|w| w.has(flags::SYNCED)));
        if !all_synced {
            return;
        }
        let progress = WatchResponse { header: header(self.processed), watch_id: -1, ..Default::default() };
        if outbox.deliver(stream, vec![progress]) == Delivery::Closed {
            self.remove_stream(stream);
        }
    }

    /// The periodic progress tick: every synced watcher that asked for progress notifications
    /// and got nothing since the last tick is told the current revision.
    pub fn progress_tick(&mut self, outbox: &mut impl Outbox) {
        let mut out: HashMap<StreamId, Vec<WatchResponse>> = HashMap::new();
        for w in self.slots.iter_mut() {
            let idle = w.has(flags::PROGRESS) && w.has(flags::SYNCED) && !w.has(flags::NOTIFIED);
            w.clear(flags::NOTIFIED);
            if idle {
                out.entry(w.stream).or_default().push(WatchResponse {
                    header: header(self.processed),
                    watch_id: w.watch_id,
                    ..Default::default()
                });
            }
        }
        for (stream, responses) in out {
            if outbox.deliver(stream, responses) == Delivery::Closed {
                self.remove_stream(stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::watcher_group::catch_up::SyncLimits;
    use crate::watch::watcher_group::test_support::{spec, Buffers, Fixture};

    #[test]
    fn progress_is_answered_only_when_every_watcher_of_the_stream_is_synced() {
        let mut f = Fixture::new();
        f.put("k", "v");
        let view = f.store.read_view();
        let mut group = WatcherGroup::new(view.revision());
        let mut out = Buffers::new(10);
        group.add(&spec(1, 0, "k", "", 1));
        group.request_progress(1, &mut out);
        assert!(out.got.is_empty(), "an unsynced watcher holds progress back");
        group.sync(&view, &mut out, SyncLimits::default());
        out.drain(1);
        group.request_progress(1, &mut out);
        assert_eq!(out.drain(1), [(-1, vec![])]);
        group.request_progress(9, &mut out);
        assert!(out.got.is_empty(), "a stream without watchers gets nothing");
    }
}
