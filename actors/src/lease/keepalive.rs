//! The stream actor of one LeaseKeepAlive stream: each request renews its lease through the
//! LeaseActor and the answer goes back on the stream, in order.

use actix::prelude::*;
use tokio::sync::mpsc;

use actcd_proto::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};

use crate::identity::Identity;
use crate::store::mvcc::engine::Engine;
use crate::store::ReadView;

use super::actor::LeaseActor;
use super::messages::Renew;

/// The actor of one keep-alive stream.
pub struct KeepAliveStream<E: Engine> {
    leases: Addr<LeaseActor>,
    output: mpsc::Sender<Box<LeaseKeepAliveResponse>>,
    view: ReadView<E>,
    identity: Identity,
}

impl<E: Engine> KeepAliveStream<E> {
    /// A stream answering on `output` (bounded: when the client stops reading, the actor
    /// waits, and so stops reading requests).
    pub fn new(
        leases: Addr<LeaseActor>,
        output: mpsc::Sender<Box<LeaseKeepAliveResponse>>,
        view: ReadView<E>,
        identity: Identity,
    ) -> Self {
        Self { leases, output, view, identity }
    }
}

impl<E: Engine> Actor for KeepAliveStream<E> {
    type Context = Context<Self>;
}

impl<E: Engine> StreamHandler<LeaseKeepAliveRequest> for KeepAliveStream<E> {
    fn handle(&mut self, req: LeaseKeepAliveRequest, ctx: &mut Self::Context) {
        let leases = self.leases.clone();
        let output = self.output.clone();
        // etcd fills the header before the renewal.
        let header = self.identity.header(self.view.revision());
        ctx.wait(
            async move {
                let ttl = leases.send(Renew(req.id)).await.unwrap_or(0);
                let resp = LeaseKeepAliveResponse { header, id: req.id, ttl };
                output.send(Box::new(resp)).await.is_ok()
            }
            .into_actor(self)
            .map(|open, _, ctx| {
                if !open {
                    ctx.stop();
                }
            }),
        );
    }
}
