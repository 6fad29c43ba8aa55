//! Where a group sends its responses: one call per stream per pass, all or nothing, and what
//! came of it. The shard implements it over the streams' mailboxes, tests over plain buffers.

use actcd_proto::watch_reply::WatchReply;

use crate::watch::messages::StreamId;

/// What happened to responses handed to a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Queued for the stream.
    Sent,
    /// The stream's buffer is full: nothing was queued.
    Full,
    /// The stream is gone.
    Closed,
}

/// Where a group sends responses, one call per stream per pass.
pub trait Outbox {
    /// Hands `responses` (in order) to `stream`'s buffer, all or nothing.
    fn deliver(&mut self, stream: StreamId, responses: Vec<WatchReply>) -> Delivery;
}
