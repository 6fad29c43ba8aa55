//! A connection's small writes of one burst leave in one socket write, after its yields; large
//! writes pass straight through, in order (src/transport/client_socket.rs).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use actcd::transport::client_socket::ClientSocket;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A socket that records each write it is given.
#[derive(Default)]
struct Recorder {
    writes: Vec<Vec<u8>>,
}

impl AsyncWrite for Recorder {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.writes.push(buf.to_vec());
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A socket over a [`Recorder`], outside any listener.
fn socket() -> ClientSocket<Recorder> {
    ClientSocket::new(Recorder::default(), None, &Default::default(), None)
}

fn flush_once(c: &mut ClientSocket<Recorder>) -> Poll<io::Result<()>> {
    Pin::new(c).poll_flush(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn a_burst_of_small_writes_leaves_in_one_write_once_a_yield_brings_nothing() {
    let mut c = socket();
    c.write_all(b"abc").await.unwrap();
    c.write_all(b"defg").await.unwrap();
    assert!(flush_once(&mut c).is_pending(), "the first flush of a burst yields");
    c.write_all(b"h").await.unwrap();
    assert!(flush_once(&mut c).is_pending(), "the yield brought more: yield again");
    assert!(flush_once(&mut c).is_ready(), "this yield brought nothing: send");
    assert_eq!(c.wire().writes, vec![b"abcdefgh".to_vec()]);
}

#[tokio::test]
async fn a_burst_that_keeps_growing_is_sent_after_sixteen_yields() {
    let mut c = socket();
    let mut yields = 0;
    loop {
        c.write_all(b"more").await.unwrap();
        if flush_once(&mut c).is_ready() {
            break;
        }
        yields += 1;
        assert!(yields <= 16, "still holding after {yields} yields");
    }
    assert_eq!(yields, 16);
    assert_eq!(c.wire().writes.len(), 1);
}

#[tokio::test]
async fn a_flush_with_nothing_held_does_not_yield() {
    let mut c = socket();
    assert!(flush_once(&mut c).is_ready());
    c.write_all(b"x").await.unwrap();
    c.flush().await.unwrap();
    assert!(flush_once(&mut c).is_ready(), "the burst was sent: nothing held");
}

#[tokio::test]
async fn a_large_write_follows_what_is_held_and_is_not_copied() {
    let mut c = socket();
    let big = vec![7u8; 20 * 1024];
    c.write_all(b"head").await.unwrap();
    c.write_all(&big).await.unwrap();
    c.flush().await.unwrap();
    assert_eq!(c.wire().writes, vec![b"head".to_vec(), big]);
}

#[tokio::test]
async fn held_bytes_are_sent_before_they_pass_the_bound() {
    let mut c = socket();
    let piece = vec![1u8; 15 * 1024];
    for _ in 0..5 {
        c.write_all(&piece).await.unwrap();
    }
    let sizes: Vec<usize> = c.wire().writes.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![4 * 15 * 1024], "four pieces fit in 64 KiB; the fifth waits for a flush");
}
