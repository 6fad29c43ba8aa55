//! One accepted socket as the servers use it, everything a connection carries in one type:
//! its share of the descriptor budget, its id and Range slots (tonic's `Connected` puts them in
//! every request's extensions), the report of its end to the registry of connections (when
//! it is dropped, the connection is gone), the rewrite of etcdctl 3.4's `:authority` on what
//! it reads ([`AuthorityFix`]), and the coalescing of what it writes.
//!
//! # Write coalescing
//! A put watched by ten streams of one connection makes ten watch responses, handed to h2 one
//! after another by ten stream tasks. h2's connection task wakes on the first, writes it and
//! flushes: without help each response leaves in a TCP segment of its own (seen on loopback:
//! 975k segments for 500k events, where etcd sent 304k, and the client paid twice the CPU per
//! event to read them). grpc-go's writer coalesces what is queued when it flushes; this does
//! the same under h2: small writes are held in a buffer, and a flush yields to the runtime (the
//! task wakes itself and goes to the back of the run queue) so that the streams already woken
//! hand over their frames, and yields again while each yield brought more (at most
//! [`MAX_YIELDS`]); the flush after a yield that brought nothing writes them all at once.
//!
//! A yield costs a task poll, not a timer: nothing waits for data that is not already on its
//! way. How many: on loopback, 100k watchers over 1000 keys, 1 writer, 3000 puts
//! (`benches/fanout-segments`), one yield at most sent 204k segments, four 112k, sixteen 67k
//! (etcd 3.4: 44k), and unary puts were not slower (1 x 1 within noise, 100 x 1000 7 % more
//! requests a second). A write of [`DIRECT_BYTES`] or more (a Range answer's pieces) goes to the
//! socket as it is, after what is held. The buffer is dropped after each burst, so an idle
//! connection holds none.

use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use actcd_edge::authority_fix::AuthorityFix;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;
use tonic::transport::server::Connected;

use crate::transport::connection_budget::Permit;
use crate::transport::connections::{ConnId, ConnInfo, Connections};
use crate::transport::range_backpressure::RangeSlots;

/// How much one read from the socket takes at most.
const READ_CHUNK: usize = 16 * 1024;
/// A write at least this large is not copied into the buffer.
const DIRECT_BYTES: usize = 16 * 1024;
/// Held bytes beyond which a write first sends what is held.
const HOLD_BYTES: usize = 64 * 1024;
/// Yields of one burst at most: a burst goes on yielding while each yield brought more.
const MAX_YIELDS: u8 = 16;

/// What is under a socket: the TCP stream of an http:// URL, or TLS over it (boxed: the TLS
/// state is large). One type rather than a type parameter, so that plain and https listeners
/// feed the same servers.
pub type Wire = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// An accepted socket with all that its connection carries (see the module's notes).
pub struct ClientSocket<W = Wire> {
    wire: W,
    info: ConnInfo,
    registry: Arc<Connections>,
    /// Given back to the budget with the socket.
    _permit: Option<Permit>,
    fix: AuthorityFix,
    /// Bytes the fix let through that the reader has not taken yet.
    ready: BytesMut,
    /// Small writes of this burst, not sent yet.
    held: BytesMut,
    /// Flushes of this burst that yielded.
    yields: u8,
    /// How much was held at the last yield.
    held_at_yield: usize,
}

impl<W> ClientSocket<W> {
    /// `wire`, admitted with `permit` (none: a socket outside the budget), with a new id in
    /// `registry`; `common_name` is the verified client certificate's, when it names the user.
    pub fn new(
        wire: W,
        permit: Option<Permit>,
        registry: &Arc<Connections>,
        common_name: Option<Arc<str>>,
    ) -> Self {
        let id = ConnId(registry.next_id.fetch_add(1, Ordering::Relaxed));
        Self {
            wire,
            info: ConnInfo { id, range_slots: RangeSlots::default(), common_name },
            registry: Arc::clone(registry),
            _permit: permit,
            fix: AuthorityFix::default(),
            ready: BytesMut::new(),
            held: BytesMut::new(),
            yields: 0,
            held_at_yield: 0,
        }
    }

    /// What is under the socket.
    pub fn wire(&self) -> &W {
        &self.wire
    }
}

impl<W> Drop for ClientSocket<W> {
    fn drop(&mut self) {
        self.registry.closed(self.info.id);
    }
}

impl<W> Connected for ClientSocket<W> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl<W: AsyncRead + Unpin> AsyncRead for ClientSocket<W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A read that only completes part of a frame the fix holds back reads on: returning
        // no bytes would tell h2 the connection ended.
        while this.ready.is_empty() {
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk[..buf.remaining().clamp(1, READ_CHUNK)]);
            ready!(Pin::new(&mut this.wire).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            this.fix.feed(read.filled(), &mut this.ready);
        }
        let n = this.ready.len().min(buf.remaining());
        buf.put_slice(&this.ready.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> ClientSocket<W> {
    /// Writes out everything held.
    fn poll_send_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.wire).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.advance(n);
        }
        // Given back, not kept: most connections are idle most of the time.
        self.held = BytesMut::new();
        self.yields = 0;
        Poll::Ready(Ok(()))
    }

    /// Makes room for a write of `len` bytes: sends what is held first when the write would
    /// pass [`HOLD_BYTES`] or goes straight to the socket. Ready(true): write it to the socket.
    fn poll_room_for(&mut self, len: usize, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let direct = len >= DIRECT_BYTES;
        if self.held.len() + len > HOLD_BYTES || (direct && !self.held.is_empty()) {
            ready!(self.poll_send_held(cx))?;
        }
        Poll::Ready(Ok(direct))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ClientSocket<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if ready!(this.poll_room_for(buf.len(), cx))? {
            return Pin::new(&mut this.wire).poll_write(cx, buf);
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let len = bufs.iter().map(|b| b.len()).sum();
        if ready!(this.poll_room_for(len, cx))? {
            return Pin::new(&mut this.wire).poll_write_vectored(cx, bufs);
        }
        bufs.iter().for_each(|b| this.held.extend_from_slice(b));
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        self.wire.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.held.is_empty() {
            let grew = this.yields == 0 || this.held.len() > this.held_at_yield;
            if grew && this.yields < MAX_YIELDS {
                this.yields += 1;
                this.held_at_yield = this.held.len();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_send_held(cx))?;
        }
        Pin::new(&mut this.wire).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send_held(cx))?;
        Pin::new(&mut self.wire).poll_shutdown(cx)
    }
}
