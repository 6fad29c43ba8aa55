//! A Range answer built as the gRPC message's bytes, straight from the store, and sent from
//! those bytes: the answer costs one copy of itself, not a `Vec<KeyValue>`, then prost's
//! encoding of it, then tonic's frame of that.
//!
//! How it reaches the wire: tonic decodes the request and calls [`crate::grpc::kv`], which
//! builds the message here ([`AnswerWriter`]) and hands tonic an empty RangeResponse carrying
//! the pieces in its extensions; [`send_encoded`], around the router,
//! swaps tonic's body for [`AnswerBody`], which sends the pieces. Errors take tonic's usual way.
//!
//! The message is written in pieces of [`PIECE_BYTES`], each exactly as large as it was
//! allocated (a growing buffer would copy the answer as it doubles), each holding its share of
//! the read budget ([`crate::grpc::read_budget`]), taken after every part of the read, until
//! HTTP/2 has sent it and dropped it. The
//! 5-byte gRPC prefix names the length, known only at the end, so nothing is sent before the
//! whole answer is read: a failed read still answers with its status alone.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;
use tokio::sync::OwnedSemaphorePermit;
use tonic::Status;

use actcd_proto::etcdserverpb::ResponseHeader;

use crate::grpc::read_budget::Reservation;

/// The size of each piece after the first.
pub const PIECE_BYTES: usize = 1 << 20;
/// grpc-go's default largest message a server sends (math.MaxInt32), which etcd keeps.
const MAX_MESSAGE_BYTES: usize = i32::MAX as usize;
/// How long an answer waits for its client to take a piece before it gives up, drops what is
/// left (its budget goes to the next reads) and resets the stream.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// RangeResponse's field numbers (etcd's rpc.proto).
const HEADER: u32 = 1;
const KVS: u32 = 2;
const MORE: u32 = 3;
const COUNT: u32 = 4;

/// The encoded answer of one Range, in the order its pieces go out: what the KV service
/// leaves in the response's extensions.
#[derive(Clone)]
pub struct EncodedAnswer(Vec<Bytes>);

/// One piece's bytes and its share of the budget, given back when HTTP/2 drops the piece.
struct Piece {
    bytes: Vec<u8>,
    _budget: Option<OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Writes a RangeResponse field by field into pieces. A full piece waits in `unsettled` until
/// [`AnswerWriter::settle`] takes its bytes from the budget.
pub struct AnswerWriter {
    unsettled: Vec<Vec<u8>>,
    sealed: Vec<Bytes>,
    current: Vec<u8>,
    len: usize,
}

impl AnswerWriter {
    /// A writer whose first piece fits `estimated` bytes (more pieces follow if it is short).
    pub fn new(estimated: u64, header: &Option<ResponseHeader>) -> Self {
        let first = usize::try_from(estimated).unwrap_or(PIECE_BYTES).saturating_add(64).min(PIECE_BYTES);
        let mut writer =
            Self { unsettled: Vec::new(), sealed: Vec::new(), current: Vec::with_capacity(first), len: 0 };
        if let Some(header) = header {
            writer.length_delimited(HEADER, &header.encode_to_vec());
        }
        writer
    }

    /// Adds one `mvccpb.KeyValue`, given encoded.
    pub fn kv(&mut self, encoded: &[u8]) {
        self.length_delimited(KVS, encoded);
    }

    /// Takes the bytes of the pieces written so far from the budget, waiting for them if the
    /// read holds the building turn.
    pub async fn settle(&mut self, reservation: &mut Reservation) {
        for bytes in std::mem::take(&mut self.unsettled) {
            let budget = reservation.take(bytes.len()).await;
            self.sealed.push(Bytes::from_owner(Piece { bytes, _budget: budget }));
        }
    }

    /// Ends the message with `more` and `count` and returns its pieces, prefix first.
    pub async fn finish(
        mut self,
        more: bool,
        count: i64,
        reservation: &mut Reservation,
    ) -> Result<EncodedAnswer, Status> {
        // Fields equal to their default are left out, as prost leaves them out.
        let mut tail = Vec::with_capacity(24);
        if more {
            prost::encoding::bool::encode(MORE, &more, &mut tail);
        }
        if count != 0 {
            prost::encoding::int64::encode(COUNT, &count, &mut tail);
        }
        self.write(&tail);
        if self.len > MAX_MESSAGE_BYTES {
            return Err(Status::resource_exhausted(format!(
                "grpc: trying to send message larger than max ({} vs. {MAX_MESSAGE_BYTES})",
                self.len
            )));
        }
        self.seal();
        self.settle(reservation).await;
        // Not compressed, then the length; checked against i32::MAX above.
        let mut prefix = Vec::with_capacity(5);
        prefix.push(0);
        prefix.extend_from_slice(&(self.len as u32).to_be_bytes());
        let mut pieces = Vec::with_capacity(self.sealed.len() + 1);
        pieces.push(Bytes::from(prefix));
        pieces.append(&mut self.sealed);
        Ok(EncodedAnswer(pieces))
    }

    fn length_delimited(&mut self, field: u32, bytes: &[u8]) {
        let mut head = Vec::with_capacity(16);
        encode_key(field, WireType::LengthDelimited, &mut head);
        encode_varint(bytes.len() as u64, &mut head);
        self.write(&head);
        self.write(bytes);
    }

    /// Appends to the current piece, up to the capacity it was allocated with, then to new ones.
    fn write(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        while !bytes.is_empty() {
            let room = self.current.capacity() - self.current.len();
            if room == 0 {
                self.seal();
                self.current = Vec::with_capacity(PIECE_BYTES);
                continue;
            }
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.current.extend_from_slice(now);
            bytes = rest;
        }
    }

    fn seal(&mut self) {
        let bytes = std::mem::take(&mut self.current);
        if bytes.is_empty() {
            return;
        }
        self.unsettled.push(bytes);
    }
}

/// The pieces not yet taken by HTTP/2, shared with the watchdog that drops them when the
/// client stops reading.
struct Unsent {
    pieces: VecDeque<Bytes>,
    /// Pieces taken so far: the watchdog's sign of progress.
    taken: usize,
    abandoned: bool,
}

/// The HTTP body that sends an [`EncodedAnswer`], then the OK trailers.
pub struct AnswerBody {
    unsent: Arc<Mutex<Unsent>>,
    ended: bool,
}

impl AnswerBody {
    /// A body for `answer`, with a watchdog if it is more than one piece (a small answer fits
    /// HTTP/2's buffers at once and has nothing to wait for).
    pub fn new(answer: EncodedAnswer) -> Self {
        let watched = answer.0.len() > 2;
        let unsent = Arc::new(Mutex::new(Unsent { pieces: answer.0.into(), taken: 0, abandoned: false }));
        if watched {
            tokio::spawn(watch_progress(Arc::downgrade(&unsent)));
        }
        Self { unsent, ended: false }
    }
}

/// Drops the pieces of an answer whose client took none for [`STALL_TIMEOUT`]; ends when the
/// body is gone.
async fn watch_progress(unsent: Weak<Mutex<Unsent>>) {
    let mut seen = 0;
    loop {
        tokio::time::sleep(STALL_TIMEOUT).await;
        let Some(unsent) = unsent.upgrade() else { return };
        let Ok(mut unsent) = unsent.lock() else { return };
        if unsent.pieces.is_empty() {
            return;
        }
        if unsent.taken == seen {
            unsent.pieces.clear();
            unsent.abandoned = true;
            return;
        }
        seen = unsent.taken;
    }
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = match self.unsent.lock() {
            Ok(unsent) if unsent.abandoned => Err(Status::deadline_exceeded("the client stopped reading")),
            Ok(mut unsent) => {
                unsent.taken += 1;
                Ok(unsent.pieces.pop_front())
            }
            Err(_) => Err(Status::internal("range answer lock poisoned")),
        };
        Poll::Ready(Some(match next {
            Ok(Some(piece)) => Ok(Frame::data(piece)),
            Ok(None) => {
                self.ended = true;
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                Ok(Frame::trailers(trailers))
            }
            Err(status) => {
                self.ended = true;
                Err(status)
            }
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// Sends an answer that left its [`EncodedAnswer`] in the response's extensions from those
/// bytes, in place of the body tonic made for the empty message: the tower layer around the
/// gRPC router (a `map_response`).
pub fn send_encoded(mut response: http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body> {
    if let Some(answer) = response.extensions_mut().remove::<EncodedAnswer>() {
        *response.body_mut() = tonic::body::Body::new(AnswerBody::new(answer));
    }
    response
}
