//! The conn family's messages: what the gRPC edge tells a connection's actor. The third it
//! handles, [`StreamEnded`](crate::watch::messages::StreamEnded), is the watch family's: a
//! stream tells whoever holds it that it ended.

use actix::{Message, WeakRecipient};

use crate::watch::messages::{StopStream, StreamId};

/// A new stream on this connection.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachStream {
    /// The stream.
    pub id: StreamId,
    /// How to stop it. Weak: the stream stops by itself too, and a weak address costs no
    /// allocation of its own, where a strong one allocates a sender task (~100 bytes a stream).
    pub stop: WeakRecipient<StopStream>,
}

/// The connection closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConnectionClosed;
