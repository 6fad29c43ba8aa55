//! The LeaseActor: the actix shell around the [`Lessor`]. It keeps lease deadlines, answers
//! keep-alives and time-to-live queries, and revokes expired leases through the Proposer (the Raft log).

use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use actcd_proto::etcdserverpb::LeaseRevokeRequest;

use crate::store::messages::Write;
use crate::store::{Command, StoreError};

use super::lessor::Lessor;
use super::messages::{Forget, Remaining, Renew, Track};

/// How often expiries are looked for (etcd checks every 500 ms).
const EXPIRY_CHECK: Duration = Duration::from_millis(500);
/// Revokes started per check: etcd revokes expired leases at about 1000 per second.
const REVOKES_PER_CHECK: usize = 500;

/// The actor of all leases' deadlines.
pub struct LeaseActor {
    lessor: Lessor,
    store: Recipient<Write>,
    /// Mailbox capacity: keep-alive streams wait (`send`) when it is full.
    mailbox: usize,
}

impl LeaseActor {
    /// A lease actor revoking through `store`, tracking `leases` ((id, ttl)) from now.
    pub fn new(store: Recipient<Write>, leases: Vec<(i64, i64)>, mailbox: usize) -> Self {
        let mut lessor = Lessor::default();
        let now = Instant::now();
        for (id, ttl) in leases {
            lessor.track(id, ttl, now);
        }
        Self { lessor, store, mailbox }
    }

    fn revoke_expired(&mut self, ctx: &mut Context<Self>) {
        for id in self.lessor.expired(Instant::now(), REVOKES_PER_CHECK) {
            let (reply, answer) = oneshot::channel();
            let command = Command::LeaseRevoke(LeaseRevokeRequest { id });
            let store = self.store.clone();
            let revoke = async move {
                store
                    .send(Write { command, reply })
                    .await
                    .map_err(|_| StoreError::Stopped("writer gone".into()))?;
                answer.await.map_err(|_| StoreError::Stopped("writer dropped the revoke".into()))?
            };
            ctx.spawn(revoke.into_actor(self).map(move |result, actor, _| match result {
                // Revoked, or revoked by a client meanwhile: either way it is gone.
                Ok(_) | Err(StoreError::LeaseNotFound) => actor.lessor.forget(id),
                Err(err) => {
                    tracing::warn!(id, %err, "lease revoke failed; retrying");
                    actor.lessor.retry(id);
                }
            }));
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(self.mailbox);
        metrics::gauge!(crate::metric_names::ACTCD_ACTORS, "actor" => crate::metric_names::ActorKind::Lease.label()).set(1.0);
        ctx.run_interval(EXPIRY_CHECK, |actor, ctx| {
            actor.revoke_expired(ctx);
            metrics::gauge!(crate::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => crate::metric_names::ActorKind::Lease.label())
                .set(actor.lessor.heap_bytes() as f64);
        });
    }
}

impl Handler<Track> for LeaseActor {
    type Result = ();

    fn handle(&mut self, msg: Track, _: &mut Self::Context) {
        self.lessor.track(msg.id, msg.ttl, Instant::now());
    }
}

impl Handler<Renew> for LeaseActor {
    type Result = i64;

    fn handle(&mut self, msg: Renew, _: &mut Self::Context) -> i64 {
        self.lessor.renew(msg.0, Instant::now()).unwrap_or(0)
    }
}

impl Handler<Remaining> for LeaseActor {
    type Result = Option<(i64, i64)>;

    fn handle(&mut self, msg: Remaining, _: &mut Self::Context) -> Self::Result {
        self.lessor.remaining(msg.0, Instant::now())
    }
}

impl Handler<Forget> for LeaseActor {
    type Result = ();

    fn handle(&mut self, msg: Forget, _: &mut Self::Context) {
        self.lessor.forget(msg.0);
    }
}
