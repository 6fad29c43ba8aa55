//! The WatchRoot actor: receives each committed batch from the store once and hands the same
//! `Arc` to every shard.

use actix::dev::SendError;
use actix::prelude::*;

use crate::watch::messages::Committed;
use actcd_store::metric_names::{hot, ActorKind};

/// The root of the watch tree.
pub struct WatchRoot {
    shards: Vec<Recipient<Committed>>,
    /// Mailbox capacity; the store drops batches for a full root (the tree catches up from
    /// storage).
    mailbox: usize,
}

impl WatchRoot {
    /// A root fanning out to `shards`.
    pub fn new(shards: Vec<Recipient<Committed>>, mailbox: usize) -> Self {
        Self { shards, mailbox }
    }
}

impl Actor for WatchRoot {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(self.mailbox);
    }
}

impl Handler<Committed> for WatchRoot {
    type Result = ();

    fn handle(&mut self, msg: Committed, _: &mut Self::Context) {
        for shard in &self.shards {
            // A full shard misses this batch and reads it back from storage: see WatcherGroup.
            match shard.try_send(msg.clone()) {
                Ok(()) => hot::mailbox_depth(ActorKind::WatchShard).increment(1.0),
                Err(SendError::Full(_)) => {
                    tracing::debug!(revision = msg.0.revision, "watch shard is behind; it will catch up")
                }
                Err(SendError::Closed(_)) => {}
            }
        }
    }
}
