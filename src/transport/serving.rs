//! The serving threads, where client connections live. Each is an actix arbiter (one thread,
//! a current-thread tokio runtime under a LocalSet) that serves the connections handed to it
//! with tonic, hosts their ConnActors, StreamActors and keep-alive actors, and owns one watch
//! shard (`server` puts shard `i` on thread `i`). A watch event then crosses no thread between
//! its shard and the socket:
//!
//! ```text
//!  state machine (main runtime) ─ one Committed per thread ─▶ ┌ serving thread i ───────────┐
//!                                                             │ shard i ─▶ StreamActor      │
//!  acceptor (main runtime) ─ a socket, to the thread          │   ─▶ hyper's stream task    │
//!      that serves the fewest ───────────────────────────────▶│   ─▶ h2's connection task   │
//!                                                             │   ─▶ socket                 │
//!                                                             └─────────────────────────────┘
//! ```
//!
//! Wakes inside one current-thread runtime cost no syscall; a wake from another thread costs an
//! eventfd write, and a context switch when the thread sleeps. What still crosses threads: a
//! committed batch, once to each serving thread (the state machine runs beside Raft on the main
//! runtime), a write's way to the Proposer and its answers back (a batch's answers once to each
//! thread, through the thread's [`Relay`]), and each accepted socket once.
//!
//! Why one acceptor rather than SO_REUSEPORT listeners: the kernel spreads a reuseport group by
//! a hash of the 4-tuple, blind to the connections that closed since, and the port is bound
//! once at start (so a port in use stops the start with one line) as before. A connection stays
//! on its thread for life, so one connection's streams share one core; etcd's own benchmark
//! defaults to one connection (`--conns 1`), which on K cores gets 1/K of the machine where a
//! goroutine per stream would spread. Blocking work stays off these threads (bcrypt, snapshots
//! and defragment go to tokio's blocking pool), since it would stall every connection here.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Arc;

use actcd_raft::proposer::Relay;
use actix::{Arbiter, ArbiterHandle};
use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

use crate::transport::connection_budget::{accepted, Accepted, ConnectionBudget, Load, Permit};

/// Sockets handed to one thread that it has not taken yet. When it is full the acceptor waits
/// for that thread, and new connections wait in the kernel's backlog.
const HANDED: usize = 64;

thread_local! {
    /// The index of the serving thread this is, on one.
    static HERE: Cell<Option<usize>> = const { Cell::new(None) };
    /// Where the Proposer sends this thread's writers their answers, on a serving thread.
    static RELAY: RefCell<Option<Relay>> = const { RefCell::new(None) };
}

/// The serving thread the caller runs on, if it runs on one.
pub fn here() -> Option<usize> {
    HERE.with(Cell::get)
}

/// The caller's serving thread's relay of write answers, on one (see [`Relay`]).
pub fn relay() -> Option<Relay> {
    RELAY.with(|relay| relay.borrow().clone())
}

/// The serving threads; they run as long as this is kept.
pub struct ServingThreads {
    arbiters: Vec<Arbiter>,
    load: Arc<Load>,
}

/// A socket on its way to a serving thread: out of the acceptor's runtime (a tokio socket is
/// registered with the reactor that made it) and into the thread's.
type Handed = (std::net::TcpStream, Permit, std::net::SocketAddr);

impl ServingThreads {
    /// Starts `count` serving threads (at least one).
    pub fn start(count: usize) -> Self {
        let arbiters: Vec<Arbiter> = (0..count.max(1))
            .map(|index| {
                let arbiter = Arbiter::new();
                // The first thing the thread runs: everything after it knows where it is, and
                // its writers' answers come through its relay.
                arbiter.spawn_fn(move || {
                    HERE.with(|here| here.set(Some(index)));
                    let (relay, hand_out) = Relay::new();
                    RELAY.with(|slot| *slot.borrow_mut() = Some(relay));
                    actix::spawn(hand_out);
                });
                arbiter
            })
            .collect();
        let load = Load::new(arbiters.len());
        Self { arbiters, load }
    }

    /// The threads' arbiters, thread `i` at `i`.
    pub fn handles(&self) -> Vec<ArbiterHandle> {
        self.arbiters.iter().map(Arbiter::handle).collect()
    }

    /// Serves `listener`: an acceptor on the current runtime takes each connection within
    /// `budget` and hands it to the thread that serves the fewest; each thread runs the server
    /// `serve` makes of the sockets handed to it. Answers each server's end, thread by thread.
    pub fn serve<S, F>(
        &self,
        listener: TcpListener,
        budget: Arc<ConnectionBudget>,
        serve: S,
    ) -> Vec<oneshot::Receiver<F::Output>>
    where
        S: Fn(BoxStream<'static, Accepted>) -> F,
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let mut ends = Vec::with_capacity(self.arbiters.len());
        let mut threads = Vec::with_capacity(self.arbiters.len());
        for arbiter in &self.arbiters {
            let (hand, handed) = mpsc::channel::<Handed>(HANDED);
            // Polled on the serving thread, so each socket joins that thread's reactor.
            let sockets = ReceiverStream::new(handed)
                .filter_map(|(socket, permit, peer)| async move {
                    TcpStream::from_std(socket).ok().map(|socket| (socket, permit, peer))
                })
                .boxed();
            let server = serve(sockets);
            let (end, ended) = oneshot::channel();
            arbiter.spawn(async move {
                let _ = end.send(server.await);
            });
            threads.push(hand);
            ends.push(ended);
        }
        tokio::spawn(hand_out(accepted(listener, budget), threads, Arc::clone(&self.load)));
        ends
    }
}

/// The acceptor: each socket to the thread serving the fewest. Ends when a thread's server
/// has ended (the process is stopping).
async fn hand_out(
    mut sockets: BoxStream<'static, Accepted>,
    threads: Vec<mpsc::Sender<Handed>>,
    load: Arc<Load>,
) {
    while let Some((socket, permit, peer)) = sockets.next().await {
        let share = load.take_least();
        let thread = share.thread();
        let Ok(socket) = socket.into_std() else { continue };
        if threads[thread].send((socket, permit.on_thread(share), peer)).await.is_err() {
            return;
        }
    }
}
