//! Messages of the watch tree and what they carry. Streams and shards hold each other as
//! `Recipient`s of these, so root → shard → stream → shard is a flow of messages, not a circle
//! of imports; this module imports nothing else of the tree.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use actix::{Message, WeakRecipient};
use bytes::Bytes;

use actcd_proto::etcdserverpb::WatchResponse;

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
    pub responses: Vec<WatchResponse>,
    /// Keeps the message counted as pending until the stream is done with it.
    pub pending: PendingOutput,
}

impl StreamOutput {
    /// Responses for a stream, counted as pending from now on.
    pub fn new(responses: Vec<WatchResponse>) -> Self {
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
        metrics::gauge!(crate::metric_names::ETCD_DEBUGGING_MVCC_PENDING_EVENTS_TOTAL)
            .increment(events as f64);
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Stream.label()).increment(1.0);
        PendingOutput { events }
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        metrics::gauge!(crate::metric_names::ETCD_DEBUGGING_MVCC_PENDING_EVENTS_TOTAL)
            .decrement(self.events as f64);
        metrics::gauge!(crate::metric_names::ACTCD_ACTOR_MAILBOX_DEPTH, "actor" => crate::metric_names::ActorKind::Stream.label()).decrement(1.0);
    }
}

/// Messages a shard may have queued for one stream before it counts the stream as full.
pub const STREAM_OUTPUT_LIMIT: usize = 4;

/// The bound on a stream's queued [`StreamOutput`]s, shared by its shard (which counts a
/// message in before sending) and its stream actor (which counts it out once the client's
/// channel took it). The actor's mailbox alone counts a message only until the actor takes it,
/// but the actor holds it longer, while it waits for room in the client's channel: the quota
/// covers that wait too.
#[derive(Debug, Clone, Default)]
pub struct OutputQuota(Arc<AtomicUsize>);

impl OutputQuota {
    /// Takes one slot, or returns false when the stream already has its limit queued.
    pub fn try_take(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < STREAM_OUTPUT_LIMIT).then_some(n + 1))
            .is_ok()
    }

    /// Returns a slot.
    pub fn release(&self) {
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
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
    Progress(StreamId),
    /// The stream is gone: drop all its watches.
    RemoveStream(StreamId),
}
