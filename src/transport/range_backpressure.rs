//! Clients that send Range requests faster than they read the answers. HTTP/2 flow control
//! stops the sending of an answer the client does not read, but the answer is already built and
//! waits in memory; a client pipelining thousands of Ranges on one connection would make the
//! server hold thousands of answers. So each connection has a fixed number of slots: a Range
//! takes one before it is served and gives it back when its answer has gone out (or the stream
//! is gone). Further Ranges on that connection wait unserved, costing only their stream's state,
//! until the client reads. Other connections are not affected.
//!
//! Only Range: it is the call whose answers can be large, and it is served from the read view
//! without waiting for an fsync, so a few dozen at a time keep a connection busy. Writes are not
//! limited here: their concurrency is what fills a group commit.
//!
//! The slots travel with the connection's other state in each request's extensions; the layer
//! is handed the function that finds them there ([`SlotsOf`]), so this module knows its slots
//! and nothing else a connection carries, and the listener's sockets, which make the slots, can
//! depend on it without it depending on them.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;

use crate::transport::observed_body::{observed, Observer};
use crate::transport::{layer_service, Answer, Inner};

/// Range answers a connection may hold undelivered: the bound is this many times the largest
/// answer, per connection.
const RANGES_PER_CONNECTION: usize = 64;
const RANGE_PATH: &str = "/etcdserverpb.KV/Range";

/// One connection's Range slots.
#[derive(Clone)]
pub struct RangeSlots(Arc<Semaphore>);

impl Default for RangeSlots {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(RANGES_PER_CONNECTION)))
    }
}

/// Finds the Range slots of the connection a request came on, in the request's extensions.
pub type SlotsOf = fn(&http::Extensions) -> Option<&RangeSlots>;

/// The service the layer wraps around the gRPC router.
#[derive(Debug, Clone)]
pub struct RangeBackpressure<S> {
    inner: S,
    slots_of: SlotsOf,
}

impl<S> RangeBackpressure<S> {
    /// Bounds `inner`'s Ranges by the slots `slots_of` finds for each request; a request that
    /// carries none (it did not come through the tracked listener) is served without a bound.
    pub fn new(inner: S, slots_of: SlotsOf) -> Self {
        Self { inner, slots_of }
    }
}

layer_service!(RangeBackpressure.inner, Answer<S::Error>, S: Clone + Send + 'static);

impl<S: Inner + Clone + Send + 'static> RangeBackpressure<S> {
    fn answer(&mut self, request: http::Request<Body>) -> Answer<S::Error> {
        let slots = match (self.slots_of)(request.extensions()) {
            Some(slots) if request.uri().path() == RANGE_PATH => Arc::clone(&slots.0),
            _ => return Box::pin(self.inner.call(request)),
        };
        // The service that was made ready is the one to call, after the wait.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            // The semaphore is never closed, so the permit is always granted.
            let permit = slots.acquire_owned().await.ok();
            let response = ready.call(request).await?;
            Ok(response.map(|body| observed(body, Holding { _permit: permit })))
        })
    }
}

/// What an answer holds beside its body: its slot, until the body is dropped. hyper drops it
/// once it sent the trailers, which it does only after the client made room for the data.
struct Holding {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Observer for Holding {}
