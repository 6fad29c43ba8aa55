//! The LeaseActor: the actix shell around the [`Lessor`]. Every member runs one; it learns the
//! leases from what its state machine applied, as it applies it ([`LeaseChanges`]), and while its member leads it
//! keeps their deadlines, answers keep-alives and time-to-live questions, and revokes expired
//! leases through a [`LeaseRevoker`], which proposes them only once it confirmed it still leads.
//! A follower's actor hands keep-alives and time-to-live questions to the leader's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use actcd_store::{LeaseChange, StoreError};

use super::feed::LeaseChanges;
use super::leader::{LeaseLeader, LeaseRevoker, LeaseSource};
use super::lessor::Lessor;
use super::messages::{Demote, Promote, Remaining, Renew};

/// How often expiries are looked for (etcd checks every 500 ms).
const EXPIRY_CHECK: Duration = Duration::from_millis(500);
/// Revokes proposed per check: etcd revokes expired leases at about 1000 per second.
const REVOKES_PER_CHECK: usize = 500;

/// The actor of all leases' deadlines.
pub struct LeaseActor {
    lessor: Lessor,
    revoker: Arc<dyn LeaseRevoker>,
    source: Box<dyn LeaseSource>,
    changes: LeaseChanges,
    leader: Arc<dyn LeaseLeader>,
    /// Mailbox capacity: keep-alive streams wait (`send`) when it is full.
    mailbox: usize,
}

impl LeaseActor {
    /// A lease actor over the leases of `source` and the `changes` applied to them since,
    /// revoking through `revoker`, asking `leader` when it is not primary; `primary` when its
    /// member is known to lead alone from the start.
    pub fn new(
        revoker: Arc<dyn LeaseRevoker>,
        mut source: Box<dyn LeaseSource>,
        mut changes: LeaseChanges,
        leader: Arc<dyn LeaseLeader>,
        primary: bool,
        mailbox: usize,
    ) -> Result<Self, StoreError> {
        let mut lessor = if primary { Lessor::primary() } else { Lessor::default() };
        // Changes handed over before this point are in the list already.
        changes.take();
        lessor.reset(source.list()?, Instant::now());
        Ok(Self { lessor, revoker, source, changes, leader, mailbox })
    }

    /// Takes what apply changed since the last look.
    fn catch_up(&mut self) {
        let now = Instant::now();
        for change in self.changes.take() {
            match change {
                LeaseChange::Granted { id, ttl } => self.lessor.track(id, ttl, now),
                LeaseChange::Revoked(id) => self.lessor.forget(id),
                LeaseChange::Reloaded => match self.source.list() {
                    Ok(list) => self.lessor.reset(list, now),
                    Err(err) => tracing::warn!(%err, "cannot reload the leases"),
                },
            }
        }
    }

    fn revoke_expired(&mut self, ctx: &mut Context<Self>) {
        let expired = self.lessor.expired(Instant::now(), REVOKES_PER_CHECK);
        if expired.is_empty() {
            return;
        }
        let ids = expired.clone();
        let revoke = self.revoker.revoke_expired(expired);
        ctx.spawn(revoke.into_actor(self).map(move |result, actor, _| {
            let answers = result.unwrap_or_else(|err| vec![Err(err); ids.len()]);
            for (id, answer) in ids.into_iter().zip(answers) {
                match answer {
                    // Revoked, or revoked by a client meanwhile: either way it is gone.
                    Ok(()) | Err(StoreError::LeaseNotFound) => actor.lessor.forget(id),
                    Err(err) => {
                        tracing::debug!(id, %err, "lease revoke failed; retrying");
                        actor.lessor.retry(id);
                    }
                }
            }
        }));
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(self.mailbox);
        // Woken as apply hands changes over: a grant's countdown starts when it is applied.
        ctx.add_stream(self.changes.arrivals());
        metrics::gauge!(actcd_store::metric_names::ACTCD_ACTORS, "actor" => actcd_store::metric_names::ActorKind::Lease.label()).set(1.0);
        ctx.run_interval(EXPIRY_CHECK, |actor, ctx| {
            actor.catch_up();
            actor.revoke_expired(ctx);
            metrics::gauge!(actcd_store::metric_names::ACTCD_ACTOR_HEAP_BYTES, "actor" => actcd_store::metric_names::ActorKind::Lease.label())
                .set(actor.lessor.heap_bytes() as f64);
        });
    }
}

impl StreamHandler<()> for LeaseActor {
    fn handle(&mut self, (): (), _: &mut Self::Context) {
        self.catch_up();
    }
}

impl Handler<Renew> for LeaseActor {
    type Result = ResponseFuture<Result<i64, StoreError>>;

    fn handle(&mut self, msg: Renew, _: &mut Self::Context) -> Self::Result {
        if self.lessor.is_primary() {
            // What apply changed first (a grant through another member, a revoke whose keys
            // a watcher already saw deleted): the answer reflects every applied change.
            self.catch_up();
            let ttl = self.lessor.renew(msg.id, Instant::now()).unwrap_or(0);
            return Box::pin(async move { Ok(ttl) });
        }
        if msg.forwarded {
            return Box::pin(async { Err(StoreError::LeaderChanged) });
        }
        Box::pin(self.leader.renew(msg.id))
    }
}

impl Handler<Remaining> for LeaseActor {
    type Result = ResponseFuture<Result<Option<(i64, i64)>, StoreError>>;

    fn handle(&mut self, msg: Remaining, _: &mut Self::Context) -> Self::Result {
        if self.lessor.is_primary() {
            // As for Renew: a lease whose revoke is applied is gone, whether or not the check
            // timer has run since.
            self.catch_up();
            let remaining = self.lessor.remaining(msg.id, Instant::now());
            return Box::pin(async move { Ok(remaining) });
        }
        if msg.forwarded {
            return Box::pin(async { Err(StoreError::LeaderChanged) });
        }
        Box::pin(self.leader.remaining(msg.id))
    }
}

impl Handler<Promote> for LeaseActor {
    type Result = ();

    fn handle(&mut self, _: Promote, _: &mut Self::Context) {
        self.catch_up();
        self.lessor.promote(Instant::now());
        tracing::info!(
            leases = self.lessor.len(),
            "this member leads: its lessor is primary, every lease has its full TTL again"
        );
    }
}

impl Handler<Demote> for LeaseActor {
    type Result = ();

    fn handle(&mut self, _: Demote, _: &mut Self::Context) {
        self.lessor.demote();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The applied leases before the test: lease 7, of 60 s.
    struct Listed;

    impl LeaseSource for Listed {
        fn list(&mut self) -> Result<Vec<(i64, i64)>, StoreError> {
            Ok(vec![(7, 60)])
        }
    }

    struct NoLeader;

    impl LeaseLeader for NoLeader {
        fn renew(&self, _: i64) -> futures::future::BoxFuture<'static, Result<i64, StoreError>> {
            Box::pin(async { Err(StoreError::NoLeader) })
        }

        fn remaining(
            &self,
            _: i64,
        ) -> futures::future::BoxFuture<'static, Result<Option<(i64, i64)>, StoreError>> {
            Box::pin(async { Err(StoreError::NoLeader) })
        }
    }

    struct Revoker;

    impl LeaseRevoker for Revoker {
        fn revoke_expired(
            &self,
            ids: Vec<i64>,
        ) -> futures::future::BoxFuture<'static, Result<Vec<Result<(), StoreError>>, StoreError>> {
            Box::pin(async move { Ok(ids.iter().map(|_| Ok(())).collect()) })
        }
    }

    /// A revoke applied (its keys deleted, watchers told) is seen by the next TimeToLive and
    /// keep-alive at once, not at the next expiry check: a client that saw the delete event
    /// once got TTL 0 instead of etcd's -1.
    #[test]
    fn an_applied_revoke_is_seen_by_the_next_question() {
        let system = actix::System::new();
        let answers = system.block_on(async {
            let (feed, changes) = super::super::feed::channel(4);
            let revoker = Arc::new(Revoker);
            let actor = LeaseActor::new(revoker, Box::new(Listed), changes, Arc::new(NoLeader), true, 16)
                .expect("lease actor")
                .start();
            let before = actor.send(Remaining { id: 7, forwarded: false }).await.expect("answer");
            feed.send(vec![LeaseChange::Revoked(7)]);
            let after = actor.send(Remaining { id: 7, forwarded: false }).await.expect("answer");
            let renewed = actor.send(Renew { id: 7, forwarded: false }).await.expect("answer");
            (before.map(|r| r.map(|(_, granted)| granted)), after, renewed)
        });
        assert_eq!(answers, (Ok(Some(60)), Ok(None), Ok(0)));
    }

    /// A grant's countdown starts when apply hands it over, not when the lessor is next asked
    /// or next checks its expiries (up to 0.5 s later, as it did when it polled the store).
    #[test]
    fn a_grant_counts_down_from_when_it_is_applied() {
        let system = actix::System::new();
        let remaining = system.block_on(async {
            let (feed, changes) = super::super::feed::channel(4);
            let actor =
                LeaseActor::new(Arc::new(Revoker), Box::new(Listed), changes, Arc::new(NoLeader), true, 16)
                    .expect("lease actor")
                    .start();
            feed.send(vec![LeaseChange::Granted { id: 8, ttl: 30 }]);
            tokio::time::sleep(Duration::from_millis(1100)).await;
            actor.send(Remaining { id: 8, forwarded: false }).await.expect("answer")
        });
        let (left, granted) = remaining.expect("primary").expect("lease 8 is alive");
        assert_eq!(granted, 30);
        assert!(left < 30, "counted down from the push: {left} s left");
    }
}
