//! Messages of the watch tree and what they carry. Streams and shards hold each other as
//! `Recipient`s of these, so state machine → shard → stream → shard is a flow of messages, not a circle
//! of imports; this module imports nothing else of the tree.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix::{Message, WeakRecipient};
use bytes::Bytes;

use actcd_proto::watch_reply::WatchReply;
use actcd_store::metric_names::{hot, ActorKind};
use actcd_store::CommittedEvents;

/// The events of one committed batch, published to the watch tree after the apply. Shared,
/// not copied: every subscriber gets the same `Arc`.
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct Committed(pub Arc<CommittedEvents>);

/// Identifies one Watch gRPC stream, unique for the life of the process.
pub type StreamId = u64;

/// A watch as its stream created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSpec {
    /// The stream that owns it.
    pub stream: StreamId,
    /// Its id within the stream.
    pub watch_id: i64,
    /// The first key (etcd turns an empty key into "\0").
    pub key: Bytes,
    /// Empty for a single key, "\0" for every key >= `key`, else the exclusive end.
    pub range_end: Bytes,
    /// The first revision whose events it wants.
    pub start_revision: i64,
    /// Attach the previous key-value to events.
    pub prev_kv: bool,
    /// Drop PUT events.
    pub no_put: bool,
    /// Drop DELETE events.
    pub no_delete: bool,
    /// Send periodic progress notifications while idle.
    pub progress_notify: bool,
}

/// Stop a stream (its connection went away, or its response stream was dropped).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopStream;

/// Told by a stream when it ends, to whoever holds it (its connection's ConnActor). The
/// stream holds a `Recipient` of this message, so the watch tree never imports its holder.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StreamEnded(pub StreamId);

/// Responses for one stream, in the order they must reach the client. Their headers carry only
/// the revision; the stream fills in the member identity.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StreamOutput {
    /// The responses.
    pub responses: Vec<WatchReply>,
    /// Keeps the message counted as pending until the stream is done with it.
    pub pending: PendingOutput,
}

impl StreamOutput {
    /// Responses for a stream, counted as pending from now on.
    pub fn new(responses: Vec<WatchReply>) -> Self {
        let events = responses.iter().map(|r| r.events.len()).sum();
        StreamOutput { responses, pending: PendingOutput::new(events) }
    }
}

/// One [`StreamOutput`] in etcd's pending-events gauge and in the streams' mailbox depth, for as
/// long as it lives: from the shard's send until the stream has written it to its client, or
/// until it is dropped unwritten (a failed send, a stream that stopped with it queued or while
/// it waited for its client), so a message that is gone is never left in the gauges.
#[derive(Debug)]
pub struct PendingOutput {
    events: usize,
}

impl PendingOutput {
    fn new(events: usize) -> Self {
        hot::pending_events().increment(events as f64);
        hot::mailbox_depth(ActorKind::Stream).increment(1.0);
        PendingOutput { events }
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        hot::pending_events().decrement(self.events as f64);
        hot::mailbox_depth(ActorKind::Stream).decrement(1.0);
    }
}

/// Messages a shard may have queued for one stream before it counts the stream as full.
pub const STREAM_OUTPUT_LIMIT: usize = 4;

/// The bound on a stream's queued [`StreamOutput`]s, shared by its shard (which counts a
/// message in before sending) and its stream actor (which counts it out once the client's
/// channel took it). The actor's mailbox alone counts a message only until the actor takes it,
/// but the actor holds it longer, while it waits for room in the client's channel: the quota
/// covers that wait too.
///
/// The same word remembers that the shard found the stream full ([`WANTED`]): the watchers it
/// could not serve wait in the shard's unsynced set, and the stream's next release tells the
/// shard there is room, so a lagging stream is caught up at the pace its client reads rather
/// than once per sync tick (at 100 ms a tick, a stream of large events fell seconds behind
/// and its progress requests went unanswered). One word, so a release cannot miss a refusal.
#[derive(Debug, Clone, Default)]
pub struct OutputQuota(Arc<AtomicUsize>);

/// The bit of [`OutputQuota`]'s word set by a refused take, cleared by the next release.
const WANTED: usize = 1 << (usize::BITS - 1);

impl OutputQuota {
    /// Takes one slot, or returns false (and marks the stream wanted) when the stream already
    /// has its limit queued.
    pub fn try_take(&self) -> bool {
        let before = self.update(|n| if n & !WANTED < STREAM_OUTPUT_LIMIT { n + 1 } else { n | WANTED });
        before & !WANTED < STREAM_OUTPUT_LIMIT
    }

    /// Returns a slot the shard took but could not send with; the stream stays wanted.
    pub fn give_back(&self) {
        self.update(|n| (n & !WANTED).saturating_sub(1) | WANTED);
    }

    /// Returns a slot; true when the shard was refused since the last release and waits to
    /// hear that the stream has room.
    pub fn release(&self) -> bool {
        self.update(|n| (n & !WANTED).saturating_sub(1)) & WANTED != 0
    }

    /// Applies `f` atomically; the word before.
    fn update(&self, f: impl Fn(usize) -> usize) -> usize {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(f(n))).unwrap_or_else(|n| n)
    }
}

/// What a stream asks of its shard. One message type, so a stream holds one recipient.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ShardRequest {
    /// The stream introduces itself before its first watch.
    Register {
        /// The stream.
        stream: StreamId,
        /// Where the shard sends the stream's responses. Weak: a strong address allocates a
        /// sender of its own (~110 bytes a stream); the shard makes one per delivery.
        outbox: WeakRecipient<StreamOutput>,
        /// The bound on what the shard may have queued for the stream.
        quota: OutputQuota,
    },
    /// Adds a watch (its id already chosen by the stream).
    Add(WatchSpec),
    /// Cancels one watch.
    Cancel {
        /// The stream.
        stream: StreamId,
        /// The watch.
        watch_id: i64,
    },
    /// The client asked for a progress notification (WatchProgressRequest).
    Progress {
        /// The stream.
        stream: StreamId,
        /// The store's visible revision when the request came: a write the client saw
        /// acknowledged may not have reached this shard yet, and the answer must not name a
        /// revision before it.
        at: i64,
    },
    /// A stream the shard found full has room again (see [`OutputQuota`]).
    Room,
    /// The stream is gone: drop all its watches.
    RemoveStream(StreamId),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_after_a_refusal_tells_the_stream_to_wake_its_shard_once() {
        let quota = OutputQuota::default();
        for _ in 0..STREAM_OUTPUT_LIMIT {
            assert!(quota.try_take());
        }
        assert!(!quota.release(), "no refusal yet: nobody to wake");
        assert!(quota.try_take());
        assert!(!quota.try_take(), "full");
        assert!(!quota.try_take(), "still full; refused twice, one wake-up owed");
        assert!(quota.release(), "the shard waits to hear there is room");
        assert!(!quota.release(), "told once");
        assert!(quota.try_take(), "the refusals took no slot");
        assert!(quota.try_take());
        assert!(!quota.try_take());
        // A shard whose send failed took its slot back but is still owed the wake-up.
        assert!(quota.release());
        assert!(quota.try_take());
        quota.give_back();
        assert!(quota.release(), "a failed send leaves the stream wanted");
        for _ in 0..2 * STREAM_OUTPUT_LIMIT {
            quota.release();
        }
        assert_eq!(quota.0.load(Ordering::Acquire), 0, "never below zero");
    }
}
