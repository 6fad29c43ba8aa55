//! A snapshot on the wire: the files of a RocksDB checkpoint directory, streamed one piece at
//! a time, and unpacked into a directory on the member that receives it.
//!
//! ```text
//!   chunk 0: header (leader's vote + snapshot meta, postcard), no file
//!   chunk 1..: file "000012.sst", data[0 .. 1 MiB]
//!              file "000012.sst", data[1 MiB .. ]   same name: appended
//!              file "MANIFEST-000005", data ...     a new name: a new file
//!              ...
//!   last:      file "raft-meta"                      the meta last: its arrival proves the rest
//! ```
//!
//! Only the sender reads the whole checkpoint, and never all of it at once: a piece is read
//! when the previous one has been handed to the network, so a snapshot of any size costs a
//! few pieces of memory on each side.
//!
//! A send is bounded by its progress, not by its size: it fails when the receiver takes no
//! chunk for a while, or does not answer in time once it has the last one ([`bounded`]).
//! Without that, a follower that stopped reading (a hung process, a silent network) would hold
//! its replication at "sending a snapshot" for ever; failed, openraft tries again later.

use std::future::Future;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::snapshot_store::META_FILE;
use crate::types::SnapshotFiles;
use actcd_proto::actcdpeerpb::SnapshotChunk;

/// The most file bytes one chunk carries.
const PIECE: usize = 1 << 20;

/// Pieces read ahead of the network. When full, the reading thread waits for the stream.
const READ_AHEAD: usize = 2;

/// The chunks of the checkpoint in `files`, headed by `header`. The reading thread holds
/// `files` until it is done, so a newer snapshot built meanwhile does not remove it. A read
/// error ends the stream early; the receiver then finds the snapshot incomplete and refuses
/// it, and the leader tries again later.
pub fn send(
    cluster_id: u64,
    from: u64,
    header: Vec<u8>,
    files: SnapshotFiles,
) -> impl Stream<Item = SnapshotChunk> {
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let chunk = move |header: Vec<u8>, file: String, data: Vec<u8>| SnapshotChunk {
        cluster_id,
        from,
        header: header.into(),
        file,
        data: data.into(),
    };
    tokio::task::spawn_blocking(move || {
        if tx.blocking_send(chunk(header, String::new(), Vec::new())).is_err() {
            return;
        }
        if let Err(err) = send_files(&files.dir, &tx, &chunk) {
            tracing::warn!(%err, dir = %files.dir.display(), "cannot read the snapshot to send it");
        }
    });
    ReceiverStream::new(rx)
}

/// How far a send got: the chunks the network took, and whether it took the last.
#[derive(Debug, Default)]
pub struct SendProgress {
    taken: AtomicU64,
    ended: AtomicBool,
}

/// `chunks`, counted into `progress` as the network takes them.
pub fn counted(
    chunks: impl Stream<Item = SnapshotChunk>,
    progress: Arc<SendProgress>,
) -> impl Stream<Item = SnapshotChunk> {
    let at_end = Arc::clone(&progress);
    chunks
        .inspect(move |_| {
            progress.taken.fetch_add(1, Ordering::Relaxed);
        })
        .chain(futures::stream::poll_fn(move |_| {
            at_end.ended.store(true, Ordering::Relaxed);
            Poll::Ready(None)
        }))
}

/// Why a send was given up.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stalled {
    /// The receiver took no chunk for that long.
    #[error("the member took no snapshot chunk for {0:?}")]
    Chunks(Duration),
    /// The receiver had every chunk and gave no answer for that long.
    #[error("the member did not answer within {0:?} of the snapshot's last chunk")]
    Install(Duration),
}

/// Waits for `call`, the send of a [`counted`] stream, while it makes progress: it fails when
/// no chunk was taken for `idle`, or when no answer came within `install` of the last chunk
/// (installing a checkpoint reopens the store: it gets longer).
pub async fn bounded<F: Future>(
    call: F,
    progress: &SendProgress,
    idle: Duration,
    install: Duration,
) -> Result<F::Output, Stalled> {
    tokio::pin!(call);
    let mut seen = progress.taken.load(Ordering::Relaxed);
    loop {
        let ended = progress.ended.load(Ordering::Relaxed);
        let bound = if ended { install } else { idle };
        if let Ok(answer) = tokio::time::timeout(bound, &mut call).await {
            return Ok(answer);
        }
        if ended {
            return Err(Stalled::Install(install));
        }
        let taken = progress.taken.load(Ordering::Relaxed);
        if taken == seen && !progress.ended.load(Ordering::Relaxed) {
            return Err(Stalled::Chunks(idle));
        }
        seen = taken;
    }
}

fn send_files(
    dir: &Path,
    tx: &mpsc::Sender<SnapshotChunk>,
    chunk: &impl Fn(Vec<u8>, String, Vec<u8>) -> SnapshotChunk,
) -> std::io::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    // The meta file last: a receiver that got it whole got every file before it.
    files.sort_by_key(|f| (f.file_name() == META_FILE, f.file_name()));
    for file in files {
        if !file.file_type()?.is_file() {
            continue;
        }
        let name = file.file_name().to_string_lossy().into_owned();
        let mut reader = std::fs::File::open(file.path())?;
        let mut first = true;
        loop {
            let mut data = vec![0; PIECE];
            let n = read_full(&mut reader, &mut data)?;
            data.truncate(n);
            if n == 0 && !first {
                break;
            }
            first = false;
            if tx.blocking_send(chunk(Vec::new(), name.clone(), data)).is_err() {
                return Ok(());
            }
            if n < PIECE {
                break;
            }
        }
    }
    Ok(())
}

fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Unpacks a snapshot stream into `dir` (created here). Returns which cluster and member sent
/// it, for the caller to check before it installs anything, and the header.
pub async fn receive(
    mut chunks: impl Stream<Item = Result<SnapshotChunk, Status>> + Unpin,
    dir: &Path,
) -> Result<(u64, u64, Vec<u8>), Status> {
    let first = chunks.next().await.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
    if first.header.is_empty() {
        return Err(Status::invalid_argument("a snapshot stream starts with its header"));
    }
    tokio::fs::create_dir_all(dir).await.map_err(io_status)?;
    let mut current: Option<(String, tokio::fs::File)> = None;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        metrics::counter!(actcd_store::metric_names::ETCD_NETWORK_PEER_RECEIVED_BYTES_TOTAL, "From" => format!("{:x}", first.from))
            .increment(chunk.data.len() as u64);
        if chunk.cluster_id != first.cluster_id {
            return Err(Status::invalid_argument("a snapshot stream changed clusters"));
        }
        let name = chunk.file;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Status::invalid_argument(format!("bad snapshot file name {name:?}")));
        }
        if current.as_ref().is_none_or(|(open, _)| *open != name) {
            if let Some((_, mut file)) = current.take() {
                file.flush().await.map_err(io_status)?;
            }
            let file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(&name))
                .await
                .map_err(io_status)?;
            current = Some((name, file));
        }
        if let Some((_, file)) = current.as_mut() {
            file.write_all(&chunk.data).await.map_err(io_status)?;
        }
    }
    if let Some((_, mut file)) = current.take() {
        file.flush().await.map_err(io_status)?;
    }
    Ok((first.cluster_id, first.from, first.header.to_vec()))
}

fn io_status(err: std::io::Error) -> Status {
    Status::internal(format!("cannot write the received snapshot: {err}"))
}
