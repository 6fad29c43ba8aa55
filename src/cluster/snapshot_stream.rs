//! A snapshot on the wire: the files of a RocksDB checkpoint directory, streamed one piece at
//! a time, and unpacked into a directory on the member that receives it.
//!
//! ```text
//!   chunk 0: header (leader's vote + snapshot meta, postcard), no file
//!   chunk 1..: file "000012.sst", data[0 .. 1 MiB]
//!              file "000012.sst", data[1 MiB .. ]   same name: appended
//!              file "MANIFEST-000005", data ...     a new name: a new file
//! ```
//!
//! Only the sender reads the whole checkpoint, and never all of it at once: a piece is read
//! when the previous one has been handed to the network, so a snapshot of any size costs a
//! few pieces of memory on each side.

use std::io::Read;
use std::path::{Path, PathBuf};

use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use actcd_proto::actcdpeerpb::SnapshotChunk;

/// The most file bytes one chunk carries.
const PIECE: usize = 1 << 20;

/// Pieces read ahead of the network. When full, the reading thread waits for the stream.
const READ_AHEAD: usize = 2;

/// The chunks of the checkpoint in `dir`, headed by `header`. A read error ends the stream
/// early; the receiver then fails the install and the leader tries again later.
pub fn send(cluster_id: u64, from: u64, header: Vec<u8>, dir: PathBuf) -> impl Stream<Item = SnapshotChunk> {
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
        if let Err(err) = send_files(&dir, &tx, &chunk) {
            tracing::warn!(%err, dir = %dir.display(), "cannot read the snapshot to send it");
        }
    });
    ReceiverStream::new(rx)
}

fn send_files(
    dir: &Path,
    tx: &mpsc::Sender<SnapshotChunk>,
    chunk: &impl Fn(Vec<u8>, String, Vec<u8>) -> SnapshotChunk,
) -> std::io::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    files.sort_by_key(|f| f.file_name());
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

/// Unpacks a snapshot stream into `dir` (created here). Returns the header, and which cluster
/// sent it, for the caller to check before it installs anything.
pub async fn receive(
    mut chunks: impl Stream<Item = Result<SnapshotChunk, Status>> + Unpin,
    dir: &Path,
) -> Result<(u64, Vec<u8>), Status> {
    let first = chunks.next().await.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))??;
    if first.header.is_empty() {
        return Err(Status::invalid_argument("a snapshot stream starts with its header"));
    }
    tokio::fs::create_dir_all(dir).await.map_err(io_status)?;
    let mut current: Option<(String, tokio::fs::File)> = None;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
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
    Ok((first.cluster_id, first.header.to_vec()))
}

fn io_status(err: std::io::Error) -> Status {
    Status::internal(format!("cannot write the received snapshot: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_directory_arrives_file_for_file() {
        let from = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..(2 * PIECE + 17)).map(|i| (i % 251) as u8).collect();
        std::fs::write(from.path().join("000012.sst"), &big).unwrap();
        std::fs::write(from.path().join("CURRENT"), b"MANIFEST-000005\n").unwrap();
        std::fs::write(from.path().join("empty"), b"").unwrap();
        let chunks = send(7, 1, b"header".to_vec(), from.path().to_path_buf()).map(Ok);
        let to = tempfile::tempdir().unwrap();
        let into = to.path().join("receiving");
        let (cluster, header) = receive(Box::pin(chunks), &into).await.unwrap();
        assert_eq!((cluster, header.as_slice()), (7, &b"header"[..]));
        assert_eq!(std::fs::read(into.join("000012.sst")).unwrap(), big);
        assert_eq!(std::fs::read(into.join("CURRENT")).unwrap(), b"MANIFEST-000005\n");
        assert_eq!(std::fs::read(into.join("empty")).unwrap(), b"");

        let evil = futures::stream::iter([
            Ok(SnapshotChunk { cluster_id: 7, header: b"h".to_vec().into(), ..Default::default() }),
            Ok(SnapshotChunk { cluster_id: 7, file: "../escape".into(), ..Default::default() }),
        ]);
        let err = receive(evil, &to.path().join("evil")).await.unwrap_err();
        assert!(err.message().contains("bad snapshot file name"), "{err:?}");
        assert!(!to.path().join("escape").exists());
    }
}
