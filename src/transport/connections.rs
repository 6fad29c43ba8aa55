//! Seeing each client connection's birth and death under tonic: the server accepts from our own
//! listener stream (`super::listener`), whose sockets carry a connection id and the
//! connection's Range slots and tell the registry here when they are dropped, that is, when the
//! connection is gone.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use actix::Addr;

use actcd_actors::conn::actor::ConnActor;
use actcd_actors::conn::messages::ConnectionClosed;

use crate::transport::range_backpressure::RangeSlots;

/// A connection's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u64);

/// What each request of a connection finds in its extensions.
#[derive(Clone)]
pub struct ConnInfo {
    /// The connection's id.
    pub id: ConnId,
    /// The connection's share of undelivered Range answers.
    pub range_slots: RangeSlots,
    /// The Common Name of the client certificate the TLS handshake verified (with
    /// `--client-cert-auth`): with auth enabled it is the user of a request without a token,
    /// as on etcd.
    pub common_name: Option<Arc<str>>,
}

impl ConnInfo {
    /// The Range slots of the connection `extensions` came with: the function that
    /// [`RangeBackpressure::new`](super::range_backpressure::RangeBackpressure::new)
    /// is given.
    pub fn range_slots_of(extensions: &http::Extensions) -> Option<&RangeSlots> {
        extensions.get::<ConnInfo>().map(|conn| &conn.range_slots)
    }
}

/// Live connections that have a ConnActor (those that opened a stream). Touched by the accept
/// path, the gRPC services and socket drops on many threads, hence the mutex; each access is a
/// map lookup, never held across an await.
#[derive(Default)]
pub struct Connections {
    actors: Mutex<HashMap<ConnId, Addr<ConnActor>>>,
    pub(super) next_id: AtomicU64,
}

impl Connections {
    /// The connection's actor, started by `start` if it has none yet.
    pub fn actor(&self, id: ConnId, start: impl FnOnce() -> Addr<ConnActor>) -> Option<Addr<ConnActor>> {
        let mut actors = self.actors.lock().ok()?;
        Some(actors.entry(id).or_insert_with(start).clone())
    }

    pub(super) fn closed(&self, id: ConnId) {
        let actor = self.actors.lock().ok().and_then(|mut a| a.remove(&id));
        if let Some(actor) = actor {
            // One message per closed connection, and its streams must be stopped: do_send.
            actor.do_send(ConnectionClosed);
        }
    }

    /// Connections with an actor.
    pub fn len(&self) -> usize {
        self.actors.lock().map(|a| a.len()).unwrap_or(0)
    }

    /// True when no connection has an actor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
