//! Snapshots of the whole store: a consistent RocksDB checkpoint packed into one stream that
//! etcd's clients accept (`etcdctl snapshot save`), and the way back to a data dir
//! (`actcd snapshot restore`).
//!
//! # Format
//! ```text
//! MAGIC                                   "actcd-snapshot-v1\n"
//! per file of the checkpoint, by name:    u16 name length (BE), name, u64 size (BE), contents
//! end marker                              u16 0
//! zero padding                            up to a multiple of 512 bytes
//! checksum                                SHA-256 of everything above (32 bytes)
//! ```
//! etcd's clients treat a snapshot whose size is 32 more than a multiple of 512 as one that
//! ends in the SHA-256 of the rest, and verify it; the padding makes ours one.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::error::StoreError;
use super::rocks::RocksEngine;

/// The first bytes of every snapshot.
pub const MAGIC: &[u8] = b"actcd-snapshot-v1\n";
/// Length of the trailing checksum.
pub const CHECKSUM_LEN: u64 = 32;
/// The payload (everything before the checksum) is padded to a multiple of this.
pub const ALIGN: u64 = 512;

/// Names scratch directories uniquely within this process.
static NEXT_SCRATCH: AtomicU64 = AtomicU64::new(0);

fn io_error(what: impl std::fmt::Display, err: io::Error) -> StoreError {
    StoreError::Storage(format!("{what}: {err}"))
}

/// A directory removed (with everything in it) when this is dropped.
#[derive(Debug)]
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_dir_all(&self.0) {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.0.display(), %err, "cannot remove a snapshot scratch dir");
            }
        }
    }
}

/// Removes what snapshots left in `scratch` when the process died mid-stream.
pub fn clear_scratch(scratch: &Path) -> Result<(), StoreError> {
    match fs::remove_dir_all(scratch) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error(format!("cannot remove {}", scratch.display()), err)),
    }
}

enum Segment {
    Bytes(Vec<u8>),
    File { path: PathBuf, len: u64 },
}

/// One snapshot being streamed: a checkpoint in a scratch directory (removed when this is
/// dropped, however the stream ends) and the payload read from it.
pub struct SnapshotReader {
    segments: std::vec::IntoIter<Segment>,
    current: Option<(Box<dyn Read + Send>, u64)>,
    payload_len: u64,
    hasher: Sha256,
    // Last, so that open files are closed before the directory goes.
    _scratch: ScratchDir,
}

impl SnapshotReader {
    /// Checkpoints `engine` into a new directory under `scratch` and prepares its payload.
    pub fn create(engine: &RocksEngine, scratch: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(scratch)
            .map_err(|e| io_error(format!("cannot create {}", scratch.display()), e))?;
        let dir = scratch.join(format!(
            "checkpoint-{}-{}",
            std::process::id(),
            NEXT_SCRATCH.fetch_add(1, Ordering::Relaxed)
        ));
        // Guard first: a checkpoint that fails halfway leaves files too.
        let guard = ScratchDir(dir.clone());
        engine.checkpoint(&dir)?;
        let mut files = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| io_error(format!("cannot list {}", dir.display()), e))? {
            let entry = entry.map_err(|e| io_error("cannot list the checkpoint", e))?;
            let meta = entry.metadata().map_err(|e| io_error("cannot stat a checkpoint file", e))?;
            if !meta.is_file() {
                continue;
            }
            let name = entry
                .file_name()
                .into_string()
                .map_err(|n| StoreError::Storage(format!("checkpoint file name {n:?} is not UTF-8")))?;
            files.push((name, meta.len()));
        }
        files.sort();
        let mut segments = vec![Segment::Bytes(MAGIC.to_vec())];
        let mut payload_len = MAGIC.len() as u64;
        for (name, len) in files {
            let name_len = u16::try_from(name.len())
                .map_err(|_| StoreError::Storage(format!("checkpoint file name {name} is too long")))?;
            let mut header = Vec::with_capacity(2 + name.len() + 8);
            header.extend_from_slice(&name_len.to_be_bytes());
            header.extend_from_slice(name.as_bytes());
            header.extend_from_slice(&len.to_be_bytes());
            payload_len += header.len() as u64 + len;
            segments.push(Segment::Bytes(header));
            segments.push(Segment::File { path: dir.join(&name), len });
        }
        payload_len += 2;
        let padding = (ALIGN - payload_len % ALIGN) % ALIGN;
        let mut end = vec![0u8; 2];
        end.resize(2 + padding as usize, 0);
        payload_len += padding;
        segments.push(Segment::Bytes(end));
        Ok(Self {
            segments: segments.into_iter(),
            current: None,
            payload_len,
            hasher: Sha256::new(),
            _scratch: guard,
        })
    }

    /// Bytes of payload ([`Read`] yields exactly these), not counting the checksum.
    pub fn payload_len(&self) -> u64 {
        self.payload_len
    }

    /// The SHA-256 of everything read; the snapshot's last 32 bytes once the payload is read.
    pub fn checksum(&self) -> [u8; 32] {
        self.hasher.clone().finalize().into()
    }

    fn next_segment(&mut self) -> io::Result<bool> {
        match self.segments.next() {
            None => Ok(false),
            Some(Segment::Bytes(bytes)) => {
                let len = bytes.len() as u64;
                self.current = Some((Box::new(io::Cursor::new(bytes)), len));
                Ok(true)
            }
            Some(Segment::File { path, len }) => {
                let file = File::open(&path)?;
                self.current = Some((Box::new(BufReader::new(file)), len));
                Ok(true)
            }
        }
    }
}

impl Read for SnapshotReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some((reader, left)) = &mut self.current {
                if *left > 0 {
                    let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let n = reader.read(&mut buf[..want])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "a checkpoint file shrank while it was read",
                        ));
                    }
                    *left -= n as u64;
                    self.hasher.update(&buf[..n]);
                    return Ok(n);
                }
                self.current = None;
            }
            if !self.next_segment()? {
                return Ok(0);
            }
        }
    }
}

/// What a restore found in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Files written into the data dir.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
}

/// Checks that `file` is an actcd snapshot whose checksum verifies; returns the payload length.
pub fn verify(file: &Path) -> Result<u64, StoreError> {
    let open_err = |e| io_error(format!("cannot read {}", file.display()), e);
    let mut f = File::open(file).map_err(open_err)?;
    let len = f.metadata().map_err(open_err)?.len();
    if len < CHECKSUM_LEN || len % ALIGN != CHECKSUM_LEN {
        return Err(StoreError::Corrupt(format!(
            "{} is not an actcd snapshot: its size {len} is not 32 more than a multiple of 512",
            file.display()
        )));
    }
    let payload_len = len - CHECKSUM_LEN;
    let mut hasher = Sha256::new();
    let copied = io::copy(&mut (&mut f).take(payload_len), &mut HashWriter(&mut hasher)).map_err(open_err)?;
    if copied != payload_len {
        return Err(StoreError::Corrupt(format!("{} shrank while it was read", file.display())));
    }
    let mut stored = [0u8; CHECKSUM_LEN as usize];
    f.read_exact(&mut stored).map_err(open_err)?;
    let computed: [u8; 32] = hasher.finalize().into();
    if computed != stored {
        return Err(StoreError::Corrupt(format!("{}: snapshot checksum mismatch", file.display())));
    }
    Ok(payload_len)
}

struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Verifies `file` and unpacks it into the data dir `target`, which must not exist or be
/// empty. The files are written into a sibling directory first, handed to `check` (which can
/// open the store there to see that it loads) and only then renamed into place, so `target`
/// never holds half a snapshot.
pub fn restore(
    file: &Path,
    target: &Path,
    check: impl FnOnce(&Path) -> Result<(), StoreError>,
) -> Result<Restored, StoreError> {
    if target.exists() {
        let mut entries =
            fs::read_dir(target).map_err(|e| io_error(format!("cannot read {}", target.display()), e))?;
        if entries.next().is_some() {
            return Err(StoreError::Storage(format!("data dir {} is not empty", target.display())));
        }
    }
    let payload_len = verify(file)?;
    let name = target
        .file_name()
        .ok_or_else(|| StoreError::Storage(format!("{} names no directory", target.display())))?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| io_error(format!("cannot create {}", parent.display()), e))?;
    let mut staging_name = std::ffi::OsString::from(".");
    staging_name.push(name);
    staging_name.push(format!(".restore-{}", std::process::id()));
    let staging = ScratchDir(parent.join(staging_name));
    clear_scratch(&staging.0)?;
    fs::create_dir(&staging.0).map_err(|e| io_error(format!("cannot create {}", staging.0.display()), e))?;

    let f = File::open(file).map_err(|e| io_error(format!("cannot read {}", file.display()), e))?;
    let mut input = BufReader::new(f).take(payload_len);
    let restored = unpack(&mut input, &staging.0)?;
    // The rest is padding.
    let mut rest = Vec::new();
    input.read_to_end(&mut rest).map_err(|e| io_error("cannot read the snapshot", e))?;
    if rest.iter().any(|b| *b != 0) || rest.len() as u64 >= ALIGN {
        return Err(StoreError::Corrupt("snapshot has data after its last file".into()));
    }
    check(&staging.0)?;
    if target.exists() {
        fs::remove_dir(target).map_err(|e| io_error(format!("cannot replace {}", target.display()), e))?;
    }
    fs::rename(&staging.0, target).map_err(|e| io_error(format!("cannot create {}", target.display()), e))?;
    Ok(restored)
}

fn unpack(input: &mut impl Read, dir: &Path) -> Result<Restored, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("snapshot: {what}"));
    let mut magic = vec![0u8; MAGIC.len()];
    input.read_exact(&mut magic).map_err(|_| corrupt("too short"))?;
    if magic != MAGIC {
        return Err(corrupt("not an actcd snapshot (etcd's bbolt snapshots cannot be restored by actcd)"));
    }
    let mut restored = Restored { files: 0, bytes: 0 };
    loop {
        let mut len = [0u8; 2];
        input.read_exact(&mut len).map_err(|_| corrupt("truncated file header"))?;
        let name_len = usize::from(u16::from_be_bytes(len));
        if name_len == 0 {
            return Ok(restored);
        }
        let mut name = vec![0u8; name_len];
        input.read_exact(&mut name).map_err(|_| corrupt("truncated file name"))?;
        let name = String::from_utf8(name).map_err(|_| corrupt("file name is not UTF-8"))?;
        if name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
            return Err(corrupt(&format!("bad file name {name:?}")));
        }
        let mut size = [0u8; 8];
        input.read_exact(&mut size).map_err(|_| corrupt("truncated file header"))?;
        let size = u64::from_be_bytes(size);
        let path = dir.join(&name);
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_error(format!("cannot create {}", path.display()), e))?;
        let copied = io::copy(&mut (&mut *input).take(size), &mut out)
            .map_err(|e| io_error(format!("cannot write {}", path.display()), e))?;
        if copied != size {
            return Err(corrupt(&format!("file {name} is truncated")));
        }
        out.sync_all().map_err(|e| io_error(format!("cannot sync {}", path.display()), e))?;
        restored.files += 1;
        restored.bytes += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mvcc::batch::Batch;
    use crate::store::mvcc::command::Command;
    use crate::store::mvcc::writer::{StoreConfig, StoreCore};
    use actcd_proto::etcdserverpb::{PutRequest, RangeRequest};

    #[test]
    fn a_snapshot_round_trips_and_its_scratch_dir_goes_away() {
        let src = tempfile::tempdir().expect("dir");
        let engine = RocksEngine::open(&src.path().join("db")).expect("engine");
        let mut core = StoreCore::open(engine.clone(), StoreConfig::default()).expect("store");
        let mut batch = Batch::default();
        for i in 0..100 {
            let put = PutRequest {
                key: format!("k{i}").into_bytes().into(),
                value: vec![7u8; 300].into(),
                ..Default::default()
            };
            core.apply(&Command::Put(put), &mut batch).expect("put");
        }
        core.commit(batch).expect("commit");

        let scratch = src.path().join("scratch");
        let mut reader = SnapshotReader::create(&engine, &scratch).expect("snapshot");
        let mut payload = Vec::new();
        reader.read_to_end(&mut payload).expect("read");
        assert_eq!(payload.len() as u64, reader.payload_len());
        assert_eq!(payload.len() as u64 % ALIGN, 0);
        let checksum = reader.checksum();
        assert_eq!(fs::read_dir(&scratch).expect("scratch").count(), 1);
        drop(reader);
        assert_eq!(fs::read_dir(&scratch).expect("scratch").count(), 0, "checkpoint removed");

        let file = src.path().join("snap.db");
        fs::write(&file, [payload.as_slice(), &checksum].concat()).expect("write");
        let target = src.path().join("restored");
        let restored = restore(&file, &target, |_| Ok(())).expect("restore");
        assert!(restored.files > 0);
        let again = StoreCore::open(RocksEngine::open(&target).expect("engine"), StoreConfig::default())
            .expect("store");
        let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
        let resp = again.read_view().range(&all).expect("range");
        assert_eq!((resp.count, resp.header.map(|h| h.revision)), (100, Some(101)));

        // A non-empty target and a damaged file are refused, leaving nothing behind.
        assert!(restore(&file, &target, |_| Ok(())).is_err());
        let mut damaged = fs::read(&file).expect("read");
        damaged[100] ^= 1;
        fs::write(&file, &damaged).expect("write");
        let other = src.path().join("other");
        assert!(matches!(restore(&file, &other, |_| Ok(())), Err(StoreError::Corrupt(_))));
        assert!(!other.exists());
        fs::write(&file, &damaged[..damaged.len() - 1]).expect("write");
        assert!(restore(&file, &other, |_| Ok(())).is_err());
        // A store that does not load (as `check` finds) never becomes the data dir.
        fs::write(&file, [payload.as_slice(), &checksum].concat()).expect("write");
        let refused = restore(&file, &other, |_| Err(StoreError::Corrupt("no".into())));
        assert!(refused.is_err());
        assert!(!other.exists());
        let leftovers: Vec<_> = fs::read_dir(src.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty());
    }
}
