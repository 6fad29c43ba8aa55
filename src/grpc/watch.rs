//! The Watch service: each call starts a StreamActor (on its connection's serving thread) that owns
//! the stream from then on; the response is the receiving end of its bounded channel, which
//! stops the actor when hyper drops it. Its responses are [`WatchReply`]s (events encoded once
//! for all their watchers), which [`crate::grpc::watch_route`] sends as they are.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use actix::dev::SendError;
use actix::{Actor, Addr, AsyncContext, WeakAddr};
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Request, Response, Status, Streaming};

use actcd_actors::conn::actor::ConnActor;
use actcd_actors::conn::messages::AttachStream;
use actcd_actors::identity::Identity;
use actcd_actors::watch::messages::StopStream;
use actcd_actors::watch::shard::WatchShard;
use actcd_actors::watch::stream::{PermitCheck, StreamActor, StreamSetup, WatchPermit};
use actcd_edge::grpc_go_errors::stream_receive_error;
use actcd_edge::status::{grpc_go_text, to_status};
use actcd_proto::etcdserverpb::{WatchRequest, WatchResponse};
use actcd_proto::key_range::KeyRange;
use actcd_proto::watch_reply::WatchReply;
use actcd_store::auth_store::{Access, Need};
use actcd_store::{ReadView, RocksEngine};

use crate::grpc::arbiter_pool::ArbiterPool;
use crate::grpc::require_leader::RequireLeader;
use crate::grpc::tokens::Tokens;
use crate::grpc::who::{self, Who};
use crate::transport::connections::{ConnInfo, Connections};

/// Batches of responses (one shard output, or one request's answer, each) queued towards one
/// client beyond which its stream actor waits (see actcd_actors::watch::stream for what happens
/// next); the channel holds one more per sender. A stream's shard has at most
/// STREAM_OUTPUT_LIMIT outputs in flight to it, so a few batches keep it busy.
const RESPONSE_BUFFER: usize = 4;

/// The client's requests up to the first transport error, after which the stream ends (and
/// the actor with it); the error goes to the response stream, which ends with it (grpc-go's
/// text for a bad message). A client that closes its side cleanly keeps getting events, as on
/// etcd (its receive loop returns on EOF without ending the call): the stream then ends when
/// the connection closes or a send finds the client gone. Hand-written: `take_while` +
/// `filter_map` keep a pending `Result<WatchRequest, Status>` inline, ~500 bytes a stream for
/// nothing.
struct RequestsUntilError(Requests, FailureSlot);

// Open for the whole life of most streams: boxing it would cost an allocation per stream.
#[allow(clippy::large_enum_variant)]
enum Requests {
    Open(Streaming<WatchRequest>),
    /// The client sent END_STREAM: no more requests, and no end either.
    HalfClosed,
    Failed,
}

/// Where a request stream's error waits for the response stream to end with it. Boxed behind
/// a small mutex: a stream that never fails pays ~32 bytes, where a oneshot of a `Status` and a
/// chained future holding one cost ~450.
type FailureSlot = Arc<Mutex<Option<Box<Status>>>>;

impl Stream for RequestsUntilError {
    type Item = WatchRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchRequest>> {
        let requests = match &mut self.0 {
            Requests::Open(requests) => requests,
            Requests::HalfClosed => return Poll::Pending,
            Requests::Failed => return Poll::Ready(None),
        };
        // Either way the request stream is dropped at once: its buffers go with it.
        match ready!(requests.poll_next_unpin(cx)) {
            Some(Ok(request)) => Poll::Ready(Some(request)),
            None => {
                self.0 = Requests::HalfClosed;
                Poll::Pending
            }
            Some(Err(status)) => {
                self.0 = Requests::Failed;
                tracing::debug!(?status, "watch request stream failed");
                if let (Some(failure), Ok(mut slot)) = (stream_receive_error(status), self.1.lock()) {
                    *slot = Some(Box::new(failure));
                }
                Poll::Ready(None)
            }
        }
    }
}

/// The Watch service.
pub struct WatchService {
    /// Arbiters the stream and connection actors run on.
    pub arbiters: Arc<ArbiterPool>,
    /// The watch shards: a stream's watches live in the shard of the serving thread it runs on
    /// (shard `i` on thread `i`), or in shard `stream id % len` off them.
    pub shards: Vec<Addr<WatchShard<RocksEngine>>>,
    /// For revisions at create and cancel.
    pub view: ReadView<RocksEngine>,
    /// Header identity.
    pub identity: Identity,
    /// Fragment threshold (etcd: --max-request-bytes).
    pub max_request_bytes: usize,
    /// Live connections.
    pub connections: Arc<Connections>,
    /// Next stream id.
    pub next_stream: AtomicU64,
    /// Whether this member knows a leader, for streams that require one.
    pub leader: RequireLeader,
    /// The auth check of every watch create (see [`watch_permit`]).
    pub permit: Arc<PermitCheck>,
}

/// READ on the watched range for the user of the stream's token, against `view`'s auth state
/// at the create; refused with the cancel reason etcd gives, grpc-go's text of the refusal. A
/// from-key watch is checked over all of `[key, ∞)` (etcd checks its first key alone, the
/// hole of GHSA-xg4h-6gfc-h4m8).
pub fn watch_permit(view: ReadView<RocksEngine>, tokens: Arc<Tokens>) -> Arc<PermitCheck> {
    Arc::new(move |token: Option<&str>, common_name: Option<&str>, key: &[u8], range_end: &[u8]| {
        Who::with_token(&view, &tokens, token, common_name)
            .map_err(to_status)
            .and_then(|who| who.need(Need::Keys(Access::Read, KeyRange::new(key, range_end))))
            .map_err(|status| grpc_go_text(&status))
    })
}

impl WatchService {
    /// One Watch call from a client.
    pub fn watch(
        &self,
        request: Request<Streaming<WatchRequest>>,
    ) -> Result<Response<tonic::codegen::BoxStream<WatchReply>>, Status> {
        self.leader.check(request.metadata())?;
        let (metadata, extensions, requests) = request.into_parts();
        let failure = FailureSlot::default();
        let input = RequestsUntilError(Requests::Open(requests), Arc::clone(&failure));
        Ok(Response::new(self.start(input, failure, &metadata, &extensions)?))
    }

    /// A watch stream fed by `requests` from this process (the Lock and Election services
    /// wait on watches as etcd's do), with the rights of the caller whose `metadata` and
    /// `extensions` they pass. `requests` ending is a half-close: the stream goes on until
    /// the answer is dropped.
    pub fn open(
        &self,
        requests: impl Stream<Item = WatchRequest> + Send + Unpin + 'static,
        metadata: &MetadataMap,
        extensions: &Extensions,
    ) -> Result<tonic::codegen::BoxStream<WatchResponse>, Status> {
        let replies = self.start(
            requests.chain(futures::stream::pending()),
            FailureSlot::default(),
            metadata,
            extensions,
        )?;
        // The events decoded again: these callers read them, and none is on the fan-out path.
        Ok(Box::pin(
            replies.map(|reply| {
                reply.and_then(|r| r.into_response().map_err(|e| Status::internal(e.to_string())))
            }),
        ))
    }

    fn start(
        &self,
        input: impl Stream<Item = WatchRequest> + Send + Unpin + 'static,
        failure: FailureSlot,
        metadata: &MetadataMap,
        extensions: &Extensions,
    ) -> Result<tonic::codegen::BoxStream<WatchReply>, Status> {
        let leader_lost = RequireLeader::asked(metadata).then(|| self.leader.lost());
        let conn = extensions.get::<ConnInfo>().map(|c| c.id);
        let common_name = who::common_name_of(metadata, extensions);
        let permit = WatchPermit {
            check: Arc::clone(&self.permit),
            token: who::token(metadata).map(Box::from),
            common_name: common_name.map(Arc::from),
        };
        let arbiter = self.arbiters.next()?.clone();
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let shard = crate::transport::serving::here()
            .filter(|&here| here < self.shards.len())
            .unwrap_or((id % self.shards.len() as u64) as usize);
        let shard = self.shards[shard].downgrade().recipient();
        let conn_actor: Option<Addr<ConnActor>> = conn.and_then(|c| {
            self.connections.actor(c, || {
                let arbiter = self.arbiters.next().cloned().unwrap_or_else(|_| arbiter.clone());
                ConnActor::start_in_arbiter(&arbiter, |_| ConnActor::default())
            })
        });
        let (output, responses) = mpsc::channel(RESPONSE_BUFFER);
        let setup = StreamSetup {
            id,
            shard,
            view: self.view.clone(),
            identity: self.identity.clone(),
            max_bytes: self.max_request_bytes,
            conn: conn_actor.as_ref().map(|c| c.downgrade().recipient()),
            permit: Some(permit),
        };
        let stream: Addr<StreamActor<RocksEngine>> = StreamActor::start_in_arbiter(&arbiter, move |ctx| {
            ctx.add_stream(input);
            StreamActor::new(setup, output)
        });
        if let Some(conn_actor) = conn_actor {
            // One message per stream opened, not a fan-out, and it must not be lost (the
            // connection's close stops only the streams attached to it): do_send. What waits in
            // the mailbox is bounded by the streams this connection opens at once.
            conn_actor.do_send(AttachStream { id, stop: stream.downgrade().recipient() });
        }
        let out = WatchResponses {
            responses,
            batch: Vec::new().into_iter(),
            failure,
            actor: stream.downgrade(),
            leader_lost,
            ended: false,
        };
        Ok(Box::pin(out))
    }
}

/// The response stream of one Watch call: the actor's responses, then the request stream's
/// error if it failed. Hyper drops it when the client resets the stream; it stops the actor
/// then, which may be idle and would otherwise live on until its connection closes (a client
/// that half-closed its side sends no more requests, whose end would tell the actor).
struct WatchResponses {
    responses: mpsc::Receiver<Vec<WatchReply>>,
    /// The rest of the batch being sent; emptied (and its buffer freed) once sent, so an idle
    /// stream holds no batch.
    batch: std::vec::IntoIter<WatchReply>,
    failure: FailureSlot,
    /// Weak: a strong address allocates a sender of its own (~110 bytes a stream).
    actor: WeakAddr<StreamActor<RocksEngine>>,
    /// For a stream that requires a leader: resolves when its member lost it.
    leader_lost: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// The stream was cancelled for want of a leader.
    ended: bool,
}

impl Stream for WatchResponses {
    type Item = Result<WatchReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(lost) = self.leader_lost.as_mut() {
            if lost.as_mut().poll(cx).is_ready() {
                self.ended = true;
                return Poll::Ready(Some(Err(actcd_proto::errors::EtcdError::NoLeader.status())));
            }
        }
        loop {
            if let Some(response) = self.batch.next() {
                if self.batch.as_slice().is_empty() {
                    self.batch = Vec::new().into_iter();
                }
                return Poll::Ready(Some(Ok(response)));
            }
            match ready!(self.responses.poll_next_unpin(cx)) {
                Some(batch) => self.batch = batch.into_iter(),
                // The actor is gone (it dropped its sender), so this is after its last response.
                None => {
                    let failure = self.failure.lock().ok().and_then(|mut slot| slot.take());
                    return Poll::Ready(failure.map(|status| Err(*status)));
                }
            }
        }
    }
}

impl Drop for WatchResponses {
    fn drop(&mut self) {
        let Some(actor) = self.actor.upgrade() else { return };
        // One message per stream, at its end. A full mailbox (at most the shard's quota is
        // queued, so only in theory) means the actor is busy: its next send to the client finds
        // this channel closed, and it stops then.
        if let Err(SendError::Full(_)) = actor.try_send(StopStream) {
            tracing::debug!("watch stream busy as its response stream is dropped; it stops on its next send");
        }
    }
}
