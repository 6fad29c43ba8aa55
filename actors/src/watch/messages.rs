//! Messages of the watch tree. Streams and shards hold each other as `Recipient`s of these, so
//! root → shard → stream → shard is a flow of messages, not a circle of imports.

use actix::{Message, Recipient};

use actcd_proto::etcdserverpb::WatchResponse;

use super::watcher::WatchSpec;

/// Identifies one Watch gRPC stream, unique for the life of the process.
pub type StreamId = u64;

/// Responses for one stream, in the order they must reach the client. Their headers carry only
/// the revision; the stream fills in the member identity.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StreamOutput(pub Vec<WatchResponse>);

/// What a stream asks of its shard. One message type, so a stream holds one recipient.
#[derive(Message)]
#[rtype(result = "()")]
pub enum ShardRequest {
    /// The stream introduces itself before its first watch.
    Register {
        /// The stream.
        stream: StreamId,
        /// Where the shard sends the stream's responses.
        outbox: Recipient<StreamOutput>,
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
