//! One segment file of the write-ahead log: records back to back from offset 0, zeros after
//! the last one. A segment is zero-filled to its full size before its first record, so that
//! an append only overwrites blocks the file already has: the file's size never changes, and
//! the fdatasync after an append writes the data alone, not the inode's new size through the
//! file system's journal as well (on this machine's ext4: 86 µs for 300 bytes into a written
//! file against 165 µs for the same bytes appended to a growing one, 2026-12-06).
//!
//! Named `<seq>-<first index>.wal` in hex, sixteen digits each, so that names sort as the
//! segments follow one another; the first index also seeds the segment's checksum chain.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::record::{self, Header, HEADER_BYTES};

/// The unit a disk writes whole: a torn write leaves some of these as they were (zeros).
const SECTOR: usize = 512;

/// How a segment's records ended when it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// At a header of zeros.
    Clean,
    /// At a record that a stop tore in mid-write, starting at this offset; it and what
    /// follows were never synced, so never acknowledged.
    Torn { at: u64 },
}

/// A segment: its file, where each of its records starts, and where the next one goes.
pub struct Segment {
    pub seq: u64,
    /// The index of its first record (or of the first it will hold, while empty).
    pub first: u64,
    path: PathBuf,
    file: Arc<File>,
    /// `offsets[i]` is where the record of index `first + i` starts.
    offsets: Vec<u64>,
    /// Records encoded and not written yet (an append writes them with one call).
    staged: Vec<u8>,
    /// Where the staged bytes go: the end of the records written.
    written: u64,
    /// The file's size: what was zero-filled.
    capacity: u64,
    /// The crc of the last record, or the chain's seed when there is none.
    last_crc: u32,
}

/// The file name of segment `seq` starting at index `first`.
pub fn name(seq: u64, first: u64) -> String {
    format!("{seq:016x}-{first:016x}.wal")
}

/// `(seq, first)` from a segment's file name; None for any other file.
pub fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".wal")?;
    let (seq, first) = stem.split_once('-')?;
    if seq.len() != 16 || first.len() != 16 {
        return None;
    }
    Some((u64::from_str_radix(seq, 16).ok()?, u64::from_str_radix(first, 16).ok()?))
}

/// Creates `path` holding `bytes` zeros, written and synced: the blocks a segment's appends
/// then overwrite in place.
pub fn zero_filled(path: &Path, bytes: u64) -> io::Result<File> {
    let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.sync_all()?;
    Ok(file)
}

impl Segment {
    /// A new segment in `file` (zero-filled, already at `path`), empty.
    pub fn new(path: PathBuf, file: File, seq: u64, first: u64) -> io::Result<Self> {
        let capacity = file.metadata()?.len();
        Ok(Self {
            seq,
            first,
            path,
            file: Arc::new(file),
            offsets: Vec::new(),
            staged: Vec::new(),
            written: 0,
            capacity,
            last_crc: record::seed(first),
        })
    }

    /// Opens the segment at `path` and finds its records: from the start, each whose header
    /// is not zero, whose index follows, and whose crc chains to the one before. A header of
    /// zeros ends them cleanly (past the last record everything is zero: a segment starts
    /// zero-filled, and a cut or a torn tail is zeroed). A record that does not chain ends
    /// them too if it was torn by a stop in mid-write ([`Ended::Torn`]: one of its sectors
    /// never reached the disk, as etcd's WAL tells a torn entry); any other is a corruption of
    /// what was once synced, and the segment does not open.
    pub fn open(path: PathBuf, seq: u64, first: u64) -> io::Result<(Self, Ended)> {
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let mut segment = Self::new(path, file, seq, first)?;
        let mut at = 0u64;
        let mut header = [0u8; HEADER_BYTES];
        let mut payload = Vec::new();
        // Read front to back in large reads: a full segment holds ~10^5 small entries.
        let file = Arc::clone(&segment.file);
        let mut reader = BufReader::with_capacity(1 << 20, file.as_ref());
        let mut ended = Ended::Clean;
        while at + HEADER_BYTES as u64 <= segment.capacity {
            reader.read_exact(&mut header)?;
            let Some(parsed) = Header::parse(&header) else { break };
            let body = at + HEADER_BYTES as u64;
            let fits = body + u64::from(parsed.len) <= segment.capacity;
            let chains = parsed.index == segment.next_index() && fits && {
                payload.resize(parsed.len as usize, 0);
                reader.read_exact(&mut payload)?;
                parsed.matches(segment.last_crc, &payload)
            };
            if !chains {
                let end = if fits { body + u64::from(parsed.len) } else { body };
                if !segment.has_zero_sector(at, end)? {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "raft log segment {} is corrupt: the record at offset {at} (index {}) does \
                             not match its checksum and was not torn by a stop",
                            segment.path.display(),
                            segment.next_index()
                        ),
                    ));
                }
                ended = Ended::Torn { at };
                break;
            }
            segment.offsets.push(at);
            segment.last_crc = parsed.crc;
            at = body + u64::from(parsed.len);
        }
        segment.written = at;
        Ok((segment, ended))
    }

    /// Whether a sector's share of the bytes `from..to` is all zeros: what a write torn by a
    /// stop leaves (a disk writes a sector whole or not at all, and the file was zeros before).
    fn has_zero_sector(&self, from: u64, to: u64) -> io::Result<bool> {
        let mut buf = [0u8; SECTOR];
        let mut at = from;
        while at < to {
            let until = ((at / SECTOR as u64 + 1) * SECTOR as u64).min(to);
            let chunk = &mut buf[..(until - at) as usize];
            self.file.read_exact_at(chunk, at)?;
            if chunk.iter().all(|b| *b == 0) {
                return Ok(true);
            }
            at = until;
        }
        Ok(false)
    }

    /// Zeros `from..to`, synced: what a torn write or a cut left there must not read as
    /// records later, when new ones end just before it. Only the chunks that are not zeros
    /// already are written (most of a segment past its records is).
    fn zero(&self, from: u64, to: u64) -> io::Result<()> {
        let zeros = vec![0u8; 1 << 20];
        let mut buf = vec![0u8; 1 << 20];
        let mut at = from;
        while at < to {
            let n = (to - at).min(zeros.len() as u64) as usize;
            self.file.read_exact_at(&mut buf[..n], at)?;
            if buf[..n].iter().any(|b| *b != 0) {
                self.file.write_all_at(&zeros[..n], at)?;
            }
            at += n as u64;
        }
        self.file.sync_data()
    }

    /// Clears what a torn write left after the last record, so the next append starts on
    /// zeros. How far the write reached is not known: to the end of the segment.
    pub fn clear_torn_tail(&self) -> io::Result<()> {
        self.zero(self.written, self.capacity)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How many records it holds.
    pub fn len(&self) -> u64 {
        self.offsets.len() as u64
    }

    /// The index its next record must have.
    pub fn next_index(&self) -> u64 {
        self.first + self.len()
    }

    /// Where its records end, staged ones included.
    pub fn end(&self) -> u64 {
        self.written + self.staged.len() as u64
    }

    /// Whether a record of `payload_len` bytes still fits.
    pub fn fits(&self, payload_len: usize) -> bool {
        self.end() + (HEADER_BYTES + payload_len) as u64 <= self.capacity
    }

    /// Encodes the next record; [`Self::write_staged`] writes it.
    pub fn stage(&mut self, payload: &[u8]) {
        let index = self.next_index();
        self.offsets.push(self.end());
        self.last_crc = record::encode(&mut self.staged, self.last_crc, index, payload);
    }

    /// Writes the staged records, without fsync.
    pub fn write_staged(&mut self) -> io::Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        self.file.write_all_at(&self.staged, self.written)?;
        self.written += self.staged.len() as u64;
        self.staged.clear();
        // A burst's buffer is not kept for the next append.
        self.staged.shrink_to(64 << 10);
        Ok(())
    }

    /// The payload of record `index`, which it holds.
    pub fn read(&self, index: u64) -> io::Result<Vec<u8>> {
        let at = self.offsets[(index - self.first) as usize];
        let mut header = [0u8; HEADER_BYTES];
        self.file.read_exact_at(&mut header, at)?;
        let parsed = Header::parse(&header).filter(|h| h.index == index).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("no record of index {index} at offset {at}"))
        })?;
        let mut payload = vec![0u8; parsed.len as usize];
        self.file.read_exact_at(&mut payload, at + HEADER_BYTES as u64)?;
        Ok(payload)
    }

    /// Drops the records from `index` on (which it holds, or the one after its last), and
    /// zeros them, synced: a crash after this never finds them (the first one's crc still
    /// chains to the record before it), nor do new records that end where an old one began.
    pub fn cut(&mut self, index: u64) -> io::Result<()> {
        self.write_staged()?;
        let keep = (index - self.first) as usize;
        let at = self.offsets.get(keep).copied().unwrap_or(self.written);
        self.offsets.truncate(keep);
        self.last_crc = match keep.checked_sub(1) {
            None => record::seed(self.first),
            Some(before) => {
                let mut header = [0u8; HEADER_BYTES];
                self.file.read_exact_at(&mut header, self.offsets[before])?;
                Header::parse(&header).map_or(0, |h| h.crc)
            }
        };
        // Past the records written, the segment is zeros already (zero-filled, and a torn
        // tail is cleared at open): only the records cut need zeroing.
        let end = std::mem::replace(&mut self.written, at);
        self.zero(at, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_segments_follow_and_parse_back() {
        assert_eq!(name(1, 0x2a), "0000000000000001-000000000000002a.wal");
        assert_eq!(parse_name(&name(1, 0x2a)), Some((1, 0x2a)));
        assert!(name(9, 5) < name(10, 3));
        assert_eq!(parse_name("spare.tmp"), None);
        assert_eq!(parse_name("1-2.wal"), None);
    }

    #[test]
    fn records_survive_reopening_and_a_cut_hides_the_ones_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(0, 5));
        let mut segment = Segment::new(path.clone(), zero_filled(&path, 4096).unwrap(), 0, 5).unwrap();
        for payload in [&b"five"[..], b"six", b"seven", b"eight"] {
            segment.stage(payload);
        }
        segment.write_staged().unwrap();
        assert_eq!(segment.next_index(), 9);
        let reopened = Segment::open(path.clone(), 0, 5).unwrap().0;
        assert_eq!((reopened.len(), reopened.end()), (4, segment.end()));
        assert_eq!(reopened.read(7).unwrap(), b"seven");

        segment.cut(7).unwrap();
        segment.stage(b"SEVEN");
        segment.write_staged().unwrap();
        let reopened = Segment::open(path.clone(), 0, 5).unwrap().0;
        assert_eq!(reopened.next_index(), 8, "the old eight does not chain to the new seven");
        assert_eq!(reopened.read(7).unwrap(), b"SEVEN");

        let mut segment = reopened;
        segment.cut(6).unwrap();
        assert_eq!(Segment::open(path.clone(), 0, 5).unwrap().0.next_index(), 6, "nothing after the cut");
        segment.cut(5).unwrap();
        assert_eq!(Segment::open(path, 0, 5).unwrap().0.len(), 0);
    }

    /// A stop tore the last write: the second record's second sector never reached the disk
    /// (zeros), while the write's later bytes did.
    #[test]
    fn a_torn_record_ends_the_segment_and_what_it_left_is_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(0, 1));
        let mut segment = Segment::new(path.clone(), zero_filled(&path, 8192).unwrap(), 0, 1).unwrap();
        segment.stage(b"one");
        segment.stage(&[7u8; 2000]);
        segment.stage(b"three");
        segment.write_staged().unwrap();
        segment.file().write_all_at(&[0; SECTOR], SECTOR as u64).unwrap();
        let (reopened, ended) = Segment::open(path.clone(), 0, 1).unwrap();
        assert_eq!(reopened.len(), 1);
        assert_eq!(ended, Ended::Torn { at: segment.offsets[1] });
        assert_eq!(reopened.end(), segment.offsets[1], "the next append overwrites the torn record");
        reopened.clear_torn_tail().unwrap();
        let mut reopened = Segment::open(path.clone(), 0, 1).unwrap().0;
        reopened.stage(b"two");
        reopened.write_staged().unwrap();
        let (again, ended) = Segment::open(path, 0, 1).unwrap();
        assert_eq!((again.len(), ended), (2, Ended::Clean), "nothing of the torn write reads back");
    }

    /// A segment of `bytes` in `dir`, first index 1, holding `payloads` written (not synced).
    fn written(dir: &Path, bytes: u64, payloads: &[&[u8]]) -> (PathBuf, Segment) {
        let path = dir.join(name(0, 1));
        let mut segment = Segment::new(path.clone(), zero_filled(&path, bytes).unwrap(), 0, 1).unwrap();
        for payload in payloads {
            segment.stage(payload);
        }
        segment.write_staged().unwrap();
        (path, segment)
    }

    /// A flipped bit in a synced record is not a torn write: the segment does not open,
    /// rather than drop that record and every one after it.
    #[test]
    fn a_corrupt_record_before_others_fails_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let (path, segment) = written(dir.path(), 4096, &[&b"one"[..], b"two", b"three"]);
        let at = segment.offsets[1] + HEADER_BYTES as u64;
        segment.file().write_all_at(b"T", at).unwrap();
        let err = Segment::open(path, 0, 1).err().expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("(index 2)"), "{err}");
    }

    /// After a cut, new records may end where an old one began; the cut zeroed the old ones,
    /// so the next open does not take one for a corrupt record.
    #[test]
    fn records_shorter_than_those_cut_read_back_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut segment) = written(dir.path(), 4096, &[&b"one"[..], b"a longer two", b"three"]);
        segment.cut(2).unwrap();
        segment.stage(b"TWO");
        segment.write_staged().unwrap();
        let (reopened, ended) = Segment::open(path, 0, 1).unwrap();
        assert_eq!((reopened.len(), ended), (2, Ended::Clean));
        assert_eq!(reopened.read(2).unwrap(), b"TWO");
    }

    #[test]
    fn a_record_fits_only_within_the_zero_filled_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name(0, 1));
        let mut segment = Segment::new(path.clone(), zero_filled(&path, 64).unwrap(), 0, 1).unwrap();
        assert!(segment.fits(64 - HEADER_BYTES));
        assert!(!segment.fits(64 - HEADER_BYTES + 1));
        segment.stage(&[7; 40]);
        assert!(!segment.fits(16));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64, "appends never grow the file");
    }
}
