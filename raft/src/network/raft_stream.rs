//! Raft's appends, heartbeats and votes to one peer on one long-lived bidirectional stream (the
//! peer service's `Raft` call), as etcd keeps a stream writer per peer. Once the stream is open,
//! a call is one DATA frame each way; a unary call is a new HTTP/2 stream with its own headers
//! and trailers (three writes on the sender), a task of its own on the receiver, and a hop
//! through tonic's channel buffer on the sender.
//!
//! All of a member's calls to one peer share its stream: openraft's replication of that peer,
//! and the heartbeats of linearizable reads and the votes, which openraft sends through clients
//! of their own. Each call is numbered, the peer answers in order ([`in_order`]), and the reader
//! task hands each answer to the call of that number. openraft 0.9 keeps one append in flight
//! per follower, so the stream carries a few calls at a time, never a pipeline.
//!
//! A call not answered within its time fails alone: the answer may still come, and goes
//! nowhere. A stream whose oldest unanswered call is older than [`STALLED`] is ended by the
//! next call (an answer stuck at the head of an ordered stream holds every answer behind it),
//! and any failure of the stream ends it too, failing every call on it. The next call opens a
//! new stream: at once after a stream that answered,
//! after a back-off doubling from [`MIN_BACKOFF`] to [`MAX_BACKOFF`] after one that never did.
//! A peer of a release from before the stream answers `Unimplemented`: its calls go unary (see
//! [`super::peers`]) and the stream is tried again after [`UNARY_RECHECK`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::{Stream, StreamExt};
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::types::TypeConfig;
use actcd_proto::actcdpeerpb::peer_client::PeerClient;
use actcd_proto::actcdpeerpb::Frame;

/// Calls queued for a stream and not yet written to it. openraft has one append and a few
/// heartbeats or votes per peer out at a time; a full queue means the peer's connection
/// stalled, and a call that finds it full fails at once as unreachable (openraft backs off).
const QUEUED_CALLS: usize = 64;

/// Calls one stream's receiver serves at once; the answers still leave in order. More wait in
/// HTTP/2's flow control, which stops the sender.
pub const SERVED_AT_ONCE: usize = 16;

/// How long the oldest unanswered call may wait before the next call ends the stream: a
/// follower's append waits for its fsync, which may take a few heartbeats on a busy disk, but
/// one that took this long is stuck (etcd's peers give up on a stream after as long).
const STALLED: Duration = Duration::from_secs(1);

/// The first wait before reopening a stream that failed without an answer.
const MIN_BACKOFF: Duration = Duration::from_millis(10);

/// The longest wait before reopening a stream that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long a peer that has no `Raft` call is spoken to unary before the stream is tried again.
const UNARY_RECHECK: Duration = Duration::from_secs(30);

/// A Raft call as it travels on the stream (the receiver's view: owned).
#[derive(Deserialize)]
pub enum RaftCall {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
}

/// A Raft call as the sender writes it: the same encoding as [`RaftCall`], borrowed.
#[derive(Serialize)]
pub enum RaftCallRef<'a> {
    Append(&'a AppendEntriesRequest<TypeConfig>),
    Vote(&'a VoteRequest<u64>),
}

/// The requests that travel on the stream.
pub trait OnStream: Serialize {
    fn on_stream(&self) -> RaftCallRef<'_>;
}

impl OnStream for AppendEntriesRequest<TypeConfig> {
    fn on_stream(&self) -> RaftCallRef<'_> {
        RaftCallRef::Append(self)
    }
}

impl OnStream for VoteRequest<u64> {
    fn on_stream(&self) -> RaftCallRef<'_> {
        RaftCallRef::Vote(self)
    }
}

/// The stream to one peer: none until the first call, then one at a time.
#[derive(Clone, Default)]
pub struct RaftStream(Arc<Mutex<Link>>);

#[derive(Default)]
struct Link {
    open: Option<Open>,
    /// Numbers the streams, so that a reader that ends clears only its own.
    generation: u64,
    next_seq: u64,
    /// No stream is opened before this (the back-off after a failed one).
    retry_at: Option<Instant>,
    backoff: Duration,
    /// The peer has no stream: unary until this.
    unary_until: Option<Instant>,
}

/// An open stream: where calls are written, and who waits for the answers, in order.
struct Open {
    generation: u64,
    calls: mpsc::Sender<Frame>,
    waiting: Arc<Mutex<VecDeque<Waiter>>>,
    /// Dropped with the stream: stops its reader, which drops the HTTP/2 stream.
    _stop: oneshot::Sender<()>,
}

/// A call's number, when it was queued, and where its answer goes.
impl Open {
    /// Whether its oldest unanswered call has waited longer than [`STALLED`].
    fn stalled(&self, now: Instant) -> bool {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.front().is_some_and(|(_, queued, _)| now.duration_since(*queued) > STALLED)
    }
}

type Waiter = (u64, Instant, oneshot::Sender<Result<Frame, Status>>);

/// Why a call was not queued.
enum Refused {
    /// Speak to this peer unary.
    Unary,
    Failed(Status),
}

impl RaftStream {
    /// Sends `frame` on the stream to the peer `client` reaches and waits up to `within` for
    /// its answer; `None` when the peer must be spoken to unary.
    pub async fn call(
        &self,
        client: &PeerClient<Channel>,
        frame: Frame,
        within: Duration,
    ) -> Option<Result<Frame, Status>> {
        let answer = match self.queue(client, frame) {
            Ok(queued) => queued,
            Err(Refused::Unary) => return None,
            Err(Refused::Failed(status)) => return Some(Err(status)),
        };
        match tokio::time::timeout(within, answer).await {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(oneshot::Canceled)) => Some(Err(Status::unavailable("the peer stream ended"))),
            Err(_) => Some(Err(Status::deadline_exceeded("no answer from the peer in time"))),
        }
    }

    fn link(&self) -> std::sync::MutexGuard<'_, Link> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queue(
        &self,
        client: &PeerClient<Channel>,
        mut frame: Frame,
    ) -> Result<oneshot::Receiver<Result<Frame, Status>>, Refused> {
        let now = Instant::now();
        let mut link = self.link();
        if link.unary_until.is_some_and(|until| now < until) {
            return Err(Refused::Unary);
        }
        if link.open.as_ref().is_some_and(|open| open.calls.is_closed() || open.stalled(now)) {
            link.open = None;
        }
        if link.open.is_none() {
            if link.retry_at.is_some_and(|at| now < at) {
                return Err(Refused::Failed(Status::unavailable("the stream to this peer is backing off")));
            }
            let open = self.open(&mut link, client);
            link.open = Some(open);
        }
        frame.seq = link.next_seq;
        link.next_seq += 1;
        let seq = frame.seq;
        let Some(open) = link.open.as_mut() else { unreachable!("opened above") };
        let (answer, answered) = oneshot::channel();
        // Held while the frame is queued: its answer cannot be read before it waits for it.
        let mut waiting = open.waiting.lock().unwrap_or_else(|p| p.into_inner());
        match open.calls.try_send(frame) {
            Ok(()) => {
                waiting.push_back((seq, now, answer));
                Ok(answered)
            }
            Err(full) if full.is_full() => {
                Err(Refused::Failed(Status::unavailable("the stream to this peer is full")))
            }
            Err(_) => Err(Refused::Failed(Status::unavailable("the stream to this peer ended"))),
        }
    }

    /// Opens a stream (its reader, a task, opens the call) with `client`.
    fn open(&self, link: &mut Link, client: &PeerClient<Channel>) -> Open {
        link.generation += 1;
        let (calls, queued) = mpsc::channel(QUEUED_CALLS);
        let (stop, stopped) = oneshot::channel();
        let waiting = Arc::new(Mutex::new(VecDeque::new()));
        let reader =
            Reader { stream: self.clone(), generation: link.generation, waiting: Arc::clone(&waiting) };
        tokio::spawn(reader.run(client.clone(), queued, stopped));
        Open { generation: link.generation, calls, waiting, _stop: stop }
    }

    /// Stream `generation` ended with `status`, after `answers` answers: it is no longer the
    /// open one, if it still was.
    fn ended(&self, generation: u64, status: &Status, answers: u64) {
        let mut link = self.link();
        if link.open.as_ref().is_some_and(|open| open.generation == generation) {
            link.open = None;
        }
        let now = Instant::now();
        if status.code() == tonic::Code::Unimplemented {
            tracing::info!("a peer has no Raft stream (an older release): speaking to it unary");
            link.unary_until = Some(now + UNARY_RECHECK);
            return;
        }
        link.backoff =
            if answers > 0 { Duration::ZERO } else { (link.backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF) };
        link.retry_at = Some(now + link.backoff);
    }
}

/// The task that opens one stream and hands its answers out.
struct Reader {
    stream: RaftStream,
    generation: u64,
    waiting: Arc<Mutex<VecDeque<Waiter>>>,
}

impl Reader {
    async fn run(
        self,
        mut client: PeerClient<Channel>,
        calls: mpsc::Receiver<Frame>,
        stop: oneshot::Receiver<()>,
    ) {
        let mut answers = 0;
        let status = tokio::select! {
            // Ended by the caller: its calls' waiters are dropped with this task.
            _ = stop => return,
            status = self.read(&mut client, calls, &mut answers) => status,
        };
        tracing::debug!(%status, answers, "a peer stream ended");
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, _, waiter) in waiting {
            let _ = waiter.send(Err(status.clone()));
        }
        self.stream.ended(self.generation, &status, answers);
    }

    async fn read(
        &self,
        client: &mut PeerClient<Channel>,
        calls: mpsc::Receiver<Frame>,
        answers: &mut u64,
    ) -> Status {
        let mut stream = match client.raft(calls).await {
            Ok(response) => response.into_inner(),
            Err(status) => return status,
        };
        loop {
            let frame = match stream.message().await {
                Ok(Some(frame)) => frame,
                Ok(None) => return Status::unavailable("the peer ended the stream"),
                Err(status) => return status,
            };
            let waiter = self.waiting.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            match waiter {
                Some((seq, _, waiter)) if seq == frame.seq => {
                    *answers += 1;
                    // The caller may have given up on it: the answer goes nowhere.
                    let _ = waiter.send(Ok(frame));
                }
                _ => return Status::internal(format!("the peer answered call {} out of order", frame.seq)),
            }
        }
    }
}

/// The receiver's half: each call on `calls` served by `serve`, up to [`SERVED_AT_ONCE`] at a
/// time, all within the one task that polls the answers (hyper's task of the stream); the
/// answers leave in the order of the calls, each with its call's number. A call refused ends
/// the stream with its status.
pub fn in_order<F, Fut>(calls: Streaming<Frame>, serve: F) -> impl Stream<Item = Result<Frame, Status>> + Send
where
    F: Fn(Frame) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Frame, Status>> + Send + 'static,
{
    calls
        .map(move |call| {
            let served = call.map(|frame| {
                let seq = frame.seq;
                (seq, serve(frame))
            });
            async move {
                let (seq, serving) = served?;
                let mut answer = serving.await?;
                answer.seq = seq;
                Ok(answer)
            }
        })
        .buffered(SERVED_AT_ONCE)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use actcd_proto::actcdpeerpb::peer_server::{Peer, PeerServer};
    use tonic::codegen::BoxStream as PeerStream;
    use tonic::transport::Endpoint;

    use super::*;

    /// A peer that answers each call with the call's own body, after as many milliseconds as
    /// its first byte says (never for 255), and counts the streams opened to it.
    #[derive(Clone, Default)]
    struct Echo {
        streams: Arc<AtomicUsize>,
    }

    #[tonic::async_trait]
    impl Peer for Echo {
        async fn raft(
            &self,
            request: tonic::Request<Streaming<Frame>>,
        ) -> Result<tonic::Response<PeerStream<Frame>>, Status> {
            self.streams.fetch_add(1, Ordering::SeqCst);
            let answers = in_order(request.into_inner(), |frame: Frame| async move {
                match frame.body.first() {
                    Some(255) => std::future::pending().await,
                    Some(ms) => tokio::time::sleep(Duration::from_millis(u64::from(*ms))).await,
                    None => {}
                }
                Ok(frame)
            });
            Ok(tonic::Response::new(Box::pin(answers)))
        }
    }

    /// A peer of a release from before the stream: every call answers Unimplemented.
    struct Old;

    #[tonic::async_trait]
    impl Peer for Old {}

    async fn serve(peer: impl Peer) -> PeerClient<Channel> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(PeerServer::new(peer))
                .serve_with_incoming(incoming),
        );
        PeerClient::new(Endpoint::from_shared(url).unwrap().connect_lazy())
    }

    fn frame(body: &[u8]) -> Frame {
        Frame { cluster_id: 1, from: 2, body: body.to_vec().into(), seq: 0 }
    }

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_share_one_stream_and_each_gets_its_own_answer() {
        let echo = Echo::default();
        let client = serve(echo.clone()).await;
        let stream = RaftStream::default();
        // The earlier calls take longer: the answers still come in order, each to its caller.
        let calls = (0..40u8).map(|i| {
            let (stream, client) = (stream.clone(), client.clone());
            tokio::spawn(async move { stream.call(&client, frame(&[40 - i, i]), LONG).await })
        });
        for (i, call) in futures::future::join_all(calls).await.into_iter().enumerate() {
            let answer = call.unwrap().expect("on the stream").expect("answered");
            assert_eq!(answer.body[..], [40 - i as u8, i as u8]);
        }
        assert_eq!(echo.streams.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_stuck_on_an_answer_is_ended_by_a_later_call_which_opens_another() {
        let echo = Echo::default();
        let client = serve(echo.clone()).await;
        let stream = RaftStream::default();
        let late = stream.call(&client, frame(&[255]), Duration::from_millis(200)).await;
        assert_eq!(late.unwrap().unwrap_err().code(), tonic::Code::DeadlineExceeded);
        // Queued behind the stuck answer: it times out too.
        let behind = stream.call(&client, frame(&[0, 6]), Duration::from_millis(200)).await;
        assert_eq!(behind.unwrap().unwrap_err().code(), tonic::Code::DeadlineExceeded);
        assert_eq!(echo.streams.load(Ordering::SeqCst), 1, "a late answer alone ends nothing");
        tokio::time::sleep(STALLED).await;
        let answer = stream.call(&client, frame(&[0, 7]), LONG).await.unwrap().unwrap();
        assert_eq!(answer.body[..], [0, 7]);
        assert_eq!(echo.streams.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_peer_without_the_stream_is_spoken_to_unary() {
        let client = serve(Old).await;
        let stream = RaftStream::default();
        let first = stream.call(&client, frame(&[0]), LONG).await;
        assert_eq!(first.unwrap().unwrap_err().code(), tonic::Code::Unimplemented);
        assert!(stream.call(&client, frame(&[0]), LONG).await.is_none(), "unary from then on");
    }

    #[tokio::test]
    async fn a_peer_that_cannot_be_reached_is_tried_again_after_a_back_off() {
        let port = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        let client = PeerClient::new(
            Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect_lazy(),
        );
        let stream = RaftStream::default();
        let refused = stream.call(&client, frame(&[0]), LONG).await.unwrap().unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
        let next = stream.call(&client, frame(&[0]), LONG).await.unwrap().unwrap_err();
        assert!(next.message().contains("backing off"), "{next:?}");
    }
}
