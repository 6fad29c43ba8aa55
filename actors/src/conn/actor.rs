//! The ConnActor: owns the streams of one client connection (HTTP/2 multiplexes many), and
//! stops them when the connection goes away. Started on a connection's first stream, so
//! connections that only send unary requests cost no actor.

use std::collections::HashMap;

use actix::dev::SendError;
use actix::prelude::*;
use actix::WeakRecipient;

use crate::watch::messages::{StopStream, StreamEnded, StreamId};

use super::messages::{AttachStream, ConnectionClosed};

/// The actor of one client connection.
#[derive(Default)]
pub struct ConnActor {
    streams: HashMap<StreamId, WeakRecipient<StopStream>>,
}

impl ConnActor {
    /// Streams open on the connection.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }
}

impl Actor for ConnActor {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTORS, "actor" => actcd_store::metric_names::ActorKind::Conn.label()).increment(1.0);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Conn.label())
            .increment(std::mem::size_of::<Self>() as f64);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTORS, "actor" => actcd_store::metric_names::ActorKind::Conn.label()).decrement(1.0);
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Conn.label())
            .decrement(std::mem::size_of::<Self>() as f64);
    }
}

impl Handler<AttachStream> for ConnActor {
    type Result = ();

    fn handle(&mut self, msg: AttachStream, _: &mut Self::Context) {
        self.streams.insert(msg.id, msg.stop);
    }
}

impl Handler<StreamEnded> for ConnActor {
    type Result = ();

    fn handle(&mut self, msg: StreamEnded, _: &mut Self::Context) {
        self.streams.remove(&msg.0);
    }
}

impl Handler<ConnectionClosed> for ConnActor {
    type Result = ();

    fn handle(&mut self, _: ConnectionClosed, ctx: &mut Self::Context) {
        for stream in self.streams.drain().filter_map(|(_, stream)| stream.upgrade()) {
            // A stream whose mailbox is full is stopping anyway: its client channel is gone
            // with the connection, so its next send fails and it stops itself.
            if let Err(SendError::Full(_)) = stream.try_send(StopStream) {
                tracing::debug!("stream busy at connection close; it stops on its next send");
            }
        }
        ctx.stop();
    }
}
