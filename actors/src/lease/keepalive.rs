//! The stream actor of one LeaseKeepAlive stream: each request renews its lease through the
//! LeaseActor and the answer goes back on the stream, in order. A renewal that fails (no
//! leader to take it, or auth refused it) ends the stream with the error, as etcd's does;
//! clients open a new one.
//!
//! Auth is asked on every renewal, not once at the stream's open (etcd 3.4.42 on): a stream
//! lives for hours, and a user whose permission on the lease's keys was revoked, or whose
//! token expired, must stop keeping them alive. The renewal is refused afterwards too if the
//! auth state moved while it was under way (etcd's revision check after serving).

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::mpsc;

use actcd_proto::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};

use crate::identity::Identity;
use actcd_store::backend::engine::Engine;
use actcd_store::{ReadView, StoreError};

use super::actor::LeaseActor;
use super::messages::Renew;

/// Whether the stream's sender may renew lease `id` now, answered with the auth revision it
/// was checked at (zero when auth is disabled): the gRPC edge builds it around the stream's
/// token, which this crate cannot read.
pub type RenewCheck = dyn Fn(i64) -> Result<u64, StoreError> + Send + Sync;

/// The actor of one keep-alive stream.
pub struct KeepAliveStream<E: Engine> {
    leases: Addr<LeaseActor>,
    output: mpsc::Sender<Result<Box<LeaseKeepAliveResponse>, StoreError>>,
    view: ReadView<E>,
    identity: Identity,
    check: Arc<RenewCheck>,
}

impl<E: Engine> KeepAliveStream<E> {
    /// A stream answering on `output` (bounded: when the client stops reading, the actor
    /// waits, and so stops reading requests).
    pub fn new(
        leases: Addr<LeaseActor>,
        output: mpsc::Sender<Result<Box<LeaseKeepAliveResponse>, StoreError>>,
        view: ReadView<E>,
        identity: Identity,
        check: Arc<RenewCheck>,
    ) -> Self {
        Self { leases, output, view, identity, check }
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
        let checked = (self.check)(req.id);
        let view = self.view.clone();
        ctx.wait(
            async move {
                let renewed = match checked {
                    Err(refused) => Err(refused),
                    Ok(checked_at) => match leases.send(Renew { id: req.id, forwarded: false }).await {
                        Ok(renewed) => renewed.and_then(|ttl| {
                            if checked_at != 0 {
                                view.auth()?.unchanged_since(checked_at)?;
                            }
                            Ok(ttl)
                        }),
                        Err(_) => Err(StoreError::Stopped("lease actor gone".into())),
                    },
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
