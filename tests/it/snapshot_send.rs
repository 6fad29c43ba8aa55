//! A snapshot send is bounded by its progress: a receiver that stops taking chunks, or takes
//! them all and never answers, fails the send instead of holding the follower's replication.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use actcd_proto::actcdpeerpb::SnapshotChunk;
use actcd_raft::network::snapshot_stream::{bounded, counted, SendProgress, Stalled};

const IDLE: Duration = Duration::from_millis(200);
const INSTALL: Duration = Duration::from_millis(400);

/// A send of `n` chunks, and the progress it reports as the receiver takes them.
fn chunks(n: usize) -> (Arc<SendProgress>, impl futures::Stream<Item = SnapshotChunk> + Unpin) {
    let progress = Arc::new(SendProgress::default());
    let chunks = futures::stream::iter((0..n).map(|_| SnapshotChunk::default()));
    (Arc::clone(&progress), Box::pin(counted(chunks, progress)))
}

#[tokio::test]
async fn a_receiver_that_takes_chunks_slowly_but_steadily_finishes() {
    let (progress, mut stream) = chunks(6);
    let call = async move {
        let mut taken = 0;
        // Each chunk well inside the idle bound, the whole send well past it.
        while stream.next().await.is_some() {
            taken += 1;
            tokio::time::sleep(IDLE / 2).await;
        }
        taken
    };
    assert_eq!(bounded(call, &progress, IDLE, INSTALL).await, Ok(6));
}

#[tokio::test]
async fn a_receiver_that_stops_taking_chunks_fails_the_send() {
    let (progress, mut stream) = chunks(6);
    let started = std::time::Instant::now();
    let call = async move {
        stream.next().await;
        stream.next().await;
        futures::future::pending::<()>().await
    };
    assert_eq!(bounded(call, &progress, IDLE, INSTALL).await, Err(Stalled::Chunks(IDLE)));
    assert!(started.elapsed() < IDLE * 3, "given up after one idle window or two, not the install bound");
}

#[tokio::test]
async fn a_receiver_with_every_chunk_and_no_answer_fails_after_the_install_bound() {
    let (progress, mut stream) = chunks(3);
    let started = std::time::Instant::now();
    let call = async move {
        while stream.next().await.is_some() {}
        futures::future::pending::<()>().await
    };
    assert_eq!(bounded(call, &progress, IDLE, INSTALL).await, Err(Stalled::Install(INSTALL)));
    assert!(started.elapsed() >= INSTALL, "the install bound, not the idle one, after the last chunk");
}
