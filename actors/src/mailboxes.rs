//! The mailbox capacities of the long-lived actors, in one struct so that the server's Config
//! sets them all. A full mailbox never grows: what each sender does then is the actor's own
//! rule, written beside its field here and in the actor's `started`.

/// Capacity, in messages, of each long-lived actor's mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mailboxes {
    /// The Proposer's channel. A full one parks each writing request until there is room; the
    /// gRPC edge bounds how many requests there are.
    pub proposer: usize,
    /// Each WatchShard's. Streams wait when it is full; the state machine skips a full shard,
    /// which catches up from storage.
    pub watch_shard: usize,
    /// The LeaseActor's. Keep-alive streams wait when it is full.
    pub lease: usize,
}

impl Default for Mailboxes {
    /// The proposer's is the largest: it takes every write, and its queue drains one fsync at a
    /// time. The others hold one message per batch or per stream request.
    fn default() -> Self {
        Self { proposer: 4096, watch_shard: 1024, lease: 1024 }
    }
}
