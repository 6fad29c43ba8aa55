//! The stream actor of one LeaseKeepAlive stream: each request renews its lease through the
//! LeaseActor and the answer goes back on the stream, in order. A renewal that fails (no
//! leader to take it) ends the stream with the error, as etcd's does; clients open a new one.

use actix::prelude::*;
use tokio::sync::mpsc;

use actcd_proto::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};

use crate::identity::Identity;
use crate::store::mvcc::engine::Engine;
use crate::store::{ReadView, StoreError};

use super::actor::LeaseActor;
use super::messages::Renew;

/// The actor of one keep-alive stream.
pub struct KeepAliveStream<E: Engine> {
    leases: Addr<LeaseActor>,
    output: mpsc::Sender<Result<Box<LeaseKeepAliveResponse>, StoreError>>,
    view: ReadView<E>,
    identity: Identity,
}

impl<E: Engine> KeepAliveStream<E> {
    /// A stream answering on `output` (bounded: when the client stops reading, the actor
    /// waits, and so stops reading requests).
    pub fn new(
        leases: Addr<LeaseActor>,
        output: mpsc::Sender<Result<Box<LeaseKeepAliveResponse>, StoreError>>,
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
                let renewed = match leases.send(Renew { id: req.id, forwarded: false }).await {
                    Ok(renewed) => renewed,
                    Err(_) => Err(StoreError::Stopped("lease actor gone".into())),
                };
                let failed = renewed.is_err();
                let answer = renewed.map(|ttl| Box::new(LeaseKeepAliveResponse { header, id: req.id, ttl }));
                output.send(answer).await.is_ok() && !failed
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
