//! Progress notifications: a WatchProgressRequest answered once every watcher of its stream is
//! synced, and the periodic tick that tells idle watchers the current revision.

use std::collections::HashMap;

use actcd_proto::watch_reply::WatchReply;

use crate::watch::messages::StreamId;
use crate::watch::watcher::flags;

use super::group::{header, WatcherGroup};
use super::outbox::{Delivery, Outbox};

impl WatcherGroup {
    /// Answers a WatchProgressRequest with watch_id -1 at `processed`, ordered after everything
    /// already sent; while a watcher of the stream is still catching up, the answer waits for
    /// it (etcd 3.4.31, issue 17507: before, etcd dropped the request, and a client whose new
    /// watch matched no event waited for a progress that never came).
    pub fn request_progress(&mut self, stream: StreamId, at: i64, outbox: &mut impl Outbox) {
        if !self.streams.contains_key(&stream) {
            return;
        }
        if self.progress_ready(stream, at) {
            self.send_progress(stream, outbox);
        } else {
            let waiting = self.deferred_progress.entry(stream).or_insert(at);
            *waiting = (*waiting).max(at);
        }
    }

    /// Sends the progress that waited for streams that have now caught up (after a catch-up
    /// pass, which is what syncs watchers, and after a committed batch, which moves
    /// `processed`; a stream gone meanwhile is forgotten).
    pub(super) fn answer_deferred_progress(&mut self, outbox: &mut impl Outbox) {
        if self.deferred_progress.is_empty() {
            return;
        }
        let ready: Vec<StreamId> = self
            .deferred_progress
            .iter()
            .filter(|(s, at)| !self.streams.contains_key(s) || self.progress_ready(**s, **at))
            .map(|(s, _)| *s)
            .collect();
        for stream in ready {
            self.deferred_progress.remove(&stream);
            if self.streams.contains_key(&stream) {
                self.send_progress(stream, outbox);
            }
        }
    }

    /// Whether `stream` may be told "everything up to `processed`": every watcher of it is
    /// synced and `processed` has reached `at`.
    fn progress_ready(&self, stream: StreamId, at: i64) -> bool {
        self.processed >= at && self.stream_synced(stream)
    }

    fn stream_synced(&self, stream: StreamId) -> bool {
        self.streams.get(&stream).is_some_and(|slots| {
            slots.iter().all(|s| self.slots.get(*s).is_some_and(|w| w.has(flags::SYNCED)))
        })
    }

    fn send_progress(&mut self, stream: StreamId, outbox: &mut impl Outbox) {
        let progress = WatchReply { header: header(self.processed), watch_id: -1, ..Default::default() };
        match outbox.deliver(stream, vec![progress]) {
            Delivery::Sent => {}
            // The stream's buffer is full: answered once it drains, like a watcher's events.
            Delivery::Full => {
                self.deferred_progress.insert(stream, self.processed);
            }
            Delivery::Closed => {
                self.remove_stream(stream);
            }
        }
    }

    /// The periodic progress tick: every synced watcher that asked for progress notifications
    /// and got nothing since the last tick is told the current revision.
    pub fn progress_tick(&mut self, outbox: &mut impl Outbox) {
        let mut out: HashMap<StreamId, Vec<WatchReply>> = HashMap::new();
        for w in self.slots.iter_mut() {
            let idle = w.has(flags::PROGRESS) && w.has(flags::SYNCED) && !w.has(flags::NOTIFIED);
            w.clear(flags::NOTIFIED);
            if idle {
                out.entry(w.stream).or_default().push(WatchReply {
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
    use crate::watch::watcher_group::catch_up::SyncLimits;
    use crate::watch::watcher_group::test_support::{spec, Buffers, Fixture};

    #[test]
    fn progress_waits_until_every_watcher_of_the_stream_is_synced() {
        let mut f = Fixture::new();
        f.put("k", "v");
        f.put("other", "v");
        let mut out = Buffers::new(10);
        let (view, mut group) = f.watching(&spec(1, 0, "k", "", 1));
        let at = view.revision();
        group.request_progress(1, at, &mut out);
        group.request_progress(1, at, &mut out);
        assert!(out.got.is_empty(), "an unsynced watcher holds progress back");
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(1), [(0, vec![2]), (-1, vec![])], "the event, then one progress answer");
        group.request_progress(1, at, &mut out);
        assert_eq!(out.drain(1), [(-1, vec![])]);
        // etcd issue 17507: a new watch that matches no event still gets its answer.
        group.add(&spec(2, 0, "nothing", "", 1));
        group.request_progress(2, at, &mut out);
        assert!(out.got.is_empty());
        group.sync(&view, &mut out, SyncLimits::default());
        assert_eq!(out.drain(2), [(-1, vec![])]);
        group.request_progress(9, at, &mut out);
        assert!(out.got.is_empty(), "a stream without watchers gets nothing");
    }

    /// A write acknowledged to the client may not have reached the shard when the client asks
    /// for progress: the answer waits for the batch that brings that revision, and names it
    /// (the fresh root's CI run of stop 48 got revision 1 for a watch from 2 after a put at 3).
    #[test]
    fn progress_waits_for_the_revision_the_store_was_at() {
        let mut f = Fixture::new();
        let mut out = Buffers::new(10);
        let (view, mut group) = f.watching(&spec(1, 0, "nothing", "", 0));
        let before = view.revision();
        let batch = f.put("k", "v");
        group.request_progress(1, batch.revision, &mut out);
        assert!(out.got.is_empty(), "answered at {before}, before the shard saw {}", batch.revision);
        group.sync(&view, &mut out, SyncLimits::default());
        assert!(out.got.is_empty(), "a catch-up pass does not move the shard's revision");
        group.on_committed(&batch, &view, &mut out);
        assert_eq!(out.drain(1), [(-1, vec![])]);
        assert_eq!(group.processed(), batch.revision);
    }
}
