//! KV.RangeStream (etcd 3.7): a range answered in chunks read one after another at one pinned
//! revision, so that a whole-keyspace read holds about one chunk in memory, not the result.
//! What each message carries, how chunks are sized and when the stream ends are etcd 3.7's
//! (docs/etcd-rangestream.md); the checks before the first chunk are made by the caller
//! ([`crate::grpc::kv`]).

use prost::Message;
use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::Status;

use actcd_actors::identity::Identity;
use actcd_edge::status::to_status;
use actcd_proto::etcdserverpb::{RangeRequest, RangeResponse, RangeStreamResponse, ResponseHeader};
use actcd_store::{ReadView, RocksEngine, StoreError};

use crate::grpc::read_budget::ReadBudget;
use crate::grpc::who::Who;

/// Keys in the first chunk (etcd's initialStreamChunkLimit); later chunks grow or shrink
/// toward `--max-request-bytes` from the size of the one before.
const FIRST_CHUNK_KEYS: usize = 10;

/// Chunks read ahead of what the client has taken. When the channel is full the reader waits
/// in `send` until the client takes one, so a client that reads slowly (or HTTP/2 flow control
/// that holds tonic back) pauses the reading instead of piling chunks up in memory: the server
/// holds this chunk, the one tonic is writing out and the one being read, at most.
const QUEUED_CHUNKS: usize = 1;

/// A RangeStream whose request passed its checks (validity, linearizable wait, READ on the
/// range) and is ready to be read.
pub struct RangeStream {
    /// Where the chunks are read.
    pub view: ReadView<RocksEngine>,
    /// Fills the final header.
    pub identity: Identity,
    /// The sender, checked once before the first chunk and asked after the last whether the
    /// auth state moved meanwhile (etcd's doSerialize).
    pub who: Who,
    /// The request, as the client sent it.
    pub request: RangeRequest,
    /// The size chunks aim at: `--max-request-bytes`.
    pub target_bytes: usize,
    /// What a chunk waits for while it is read and queued: a large chunk shares the budget
    /// of large reads (by the size of the chunk before it).
    pub budget: ReadBudget,
}

/// Why the chunk loop ended early.
enum Stop {
    /// The client went away: nobody to tell.
    ClientGone,
    /// The stream ends with this status.
    Failed(Status),
}

impl From<StoreError> for Stop {
    fn from(err: StoreError) -> Self {
        Stop::Failed(to_status(err))
    }
}

type Sender = mpsc::Sender<Result<RangeStreamResponse, Status>>;

impl RangeStream {
    /// Starts reading on a task of its own and answers with the chunks as they come. The task
    /// ends when the stream does or when the client goes away (its next send fails).
    pub fn start(self) -> BoxStream<RangeStreamResponse> {
        let (tx, rx) = mpsc::channel(QUEUED_CHUNKS);
        tokio::spawn(async move {
            if let Err(Stop::Failed(status)) = self.run(&tx).await {
                // The client may be gone too; then there is nobody left to tell.
                let _ = tx.send(Err(status)).await;
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
    }

    async fn run(&self, tx: &Sender) -> Result<(), Stop> {
        let req = &self.request;
        if req.count_only {
            // One message with the header and the count, as etcd sends; limit does not apply.
            let mut answer = self.view.range(req)?;
            self.identity.fill(&mut answer.header);
            send(tx, answer).await?;
            return self.who.still_current(&self.view).map_err(Stop::Failed);
        }
        // etcd validates no limit: a negative one reads the whole range (etcd's in one chunk,
        // here chunk by chunk, which merges into the same answer).
        let total = usize::try_from(req.limit).ok().filter(|&l| l > 0).unwrap_or(usize::MAX);
        let mut page = RangeRequest {
            key: req.key.clone(),
            range_end: req.range_end.clone(),
            revision: req.revision,
            keys_only: req.keys_only,
            ..Default::default()
        };
        let mut limit = FIRST_CHUNK_KEYS.min(total);
        let mut sent = 0usize;
        // The newest revision at the first read: the final header's revision, as in Range.
        let mut first_revision = None;
        let mut last_bytes = 0;
        loop {
            let _held = self.budget.hold(last_bytes).await;
            let mut chunk = self.view.range_page(&page, limit)?;
            let newest = chunk.header.take().map_or(0, |h| h.revision);
            let header_revision = *first_revision.get_or_insert(newest);
            if page.revision <= 0 {
                // Pinned: later chunks read where the first did, whatever is written meanwhile.
                page.revision = header_revision;
            }
            sent += chunk.kvs.len();
            let next_key = chunk.kvs.last().map(|kv| after(&kv.key));
            match next_key {
                // `more` with a key to go on from: a non-final chunk, its keys alone.
                Some(next) if chunk.more && sent < total => {
                    chunk.more = false;
                    let bytes = chunk.encoded_len();
                    send(tx, chunk).await?;
                    limit = next_limit(limit, bytes, self.target_bytes).min(total - sent);
                    last_bytes = bytes as u64;
                    page.key = next;
                }
                next => {
                    let mut count = sent as i64;
                    if let (true, Some(next)) = (chunk.more, next) {
                        // The limit cut the range short: count what is left, at the same revision.
                        let rest = RangeRequest { key: next, count_only: true, ..page.clone() };
                        count += self.view.range(&rest)?.count;
                    }
                    chunk.count = count;
                    chunk.header = Some(ResponseHeader { revision: header_revision, ..Default::default() });
                    self.identity.fill(&mut chunk.header);
                    send(tx, chunk).await?;
                    return self.who.still_current(&self.view).map_err(Stop::Failed);
                }
            }
        }
    }
}

async fn send(tx: &Sender, chunk: RangeResponse) -> Result<(), Stop> {
    let message = RangeStreamResponse { range_response: Some(chunk) };
    tx.send(Ok(message)).await.map_err(|_| Stop::ClientGone)
}

/// The smallest key after `key`.
fn after(key: &[u8]) -> bytes::Bytes {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next.into()
}

/// etcd's adjustChunkLimit: double a chunk under half the target, halve one over twice the
/// target, and never go below one key (a value larger than the target goes out alone).
fn next_limit(limit: usize, bytes: usize, target: usize) -> usize {
    let next = if bytes < target / 2 {
        limit.saturating_mul(2)
    } else if bytes > target.saturating_mul(2) {
        limit / 2
    } else {
        limit
    };
    next.max(1)
}
