//! The bbolt file format etcd keeps its backend in (`member/snap/db`, and what `etcdctl
//! snapshot save` writes, with a SHA-256 after it). What the buckets hold is etcd's and the
//! store's (actcd's `etcd_file`); this is only the file: pages, trees, buckets.
//!
//! # Layout
//! - [`format`]: the page layout the reader and the writer share.
//! - [`reader`]: reads a bbolt file a page at a time, checking every offset.
//! - [`writer`]: writes a bbolt file front to back from sorted data, in two passes.

mod format;
pub mod reader;
pub mod writer;

#[cfg(test)]
mod tests {
    //! The writer against the reader: what is written reads back in order, across three branch
    //! levels, pages with overflow, empty buckets and buckets given out of name order; keys out
    //! of order and a bucket named twice are refused; a damaged file is an error, not a panic.

    use std::io::Write;

    use super::format::PAGE_SIZE;
    use super::reader::{BoltError, BoltFile, Bucket, Entry};
    use super::writer::BoltWriter;

    type Buckets = Vec<(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

    fn write(buckets: &Buckets) -> Vec<u8> {
        let fill = |db: &mut BoltWriter<'_>| {
            for (name, entries) in buckets {
                let mut b = db.bucket(name);
                for (k, v) in entries {
                    b.put(k, v).unwrap();
                }
                b.finish().unwrap();
            }
        };
        let mut first = BoltWriter::measure();
        fill(&mut first);
        let layout = first.finish().unwrap();
        let mut out = Vec::new();
        let mut second = BoltWriter::stream(&mut out, layout).unwrap();
        fill(&mut second);
        assert_eq!(second.finish().unwrap(), layout);
        assert_eq!(out.len() as u64, layout.bytes());
        out
    }

    /// The first `len` bytes of `bytes`, opened as a bbolt file.
    fn open(bytes: &[u8], len: u64) -> Result<BoltFile, BoltError> {
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(bytes).unwrap();
        BoltFile::open(tmp, len)
    }

    fn read(bytes: &[u8]) -> Buckets {
        let file = open(bytes, bytes.len() as u64).unwrap();
        let mut names = Vec::new();
        file.for_each::<BoltError>(&file.root(), &mut |e| {
            match e {
                Entry::Bucket(name, bucket) => names.push((name.to_vec(), bucket)),
                Entry::Value(..) => panic!("a value in the top-level tree"),
            }
            Ok(true)
        })
        .unwrap();
        names
            .into_iter()
            .map(|(name, bucket): (Vec<u8>, Bucket)| {
                let mut entries = Vec::new();
                file.for_each::<BoltError>(&bucket, &mut |e| {
                    if let Entry::Value(k, v) = e {
                        entries.push((k.to_vec(), v.to_vec()));
                    }
                    Ok(true)
                })
                .unwrap();
                (name, entries)
            })
            .collect()
    }

    #[test]
    fn what_is_written_reads_back_in_order() {
        // Three levels of branches in `key`, a value spanning pages, empty buckets, and
        // buckets given out of name order.
        let many: Vec<_> = (0..40_000u32)
            .map(|i| (i.to_be_bytes().to_vec(), format!("value {i}").repeat((i % 7) as usize).into_bytes()))
            .collect();
        let big = vec![(b"big".to_vec(), vec![7u8; 3 * PAGE_SIZE + 5]), (b"small".to_vec(), b"x".to_vec())];
        let buckets: Buckets = vec![
            (b"meta".to_vec(), vec![(b"a".to_vec(), b"1".to_vec())]),
            (b"key".to_vec(), many),
            (b"empty".to_vec(), Vec::new()),
            (b"blob".to_vec(), big),
        ];
        let mut expected = buckets.clone();
        expected.sort();
        assert_eq!(read(&write(&buckets)), expected);
    }

    #[test]
    fn an_empty_file_has_only_its_fixed_pages_and_a_root() {
        let bytes = write(&Vec::new());
        assert_eq!(bytes.len(), 4 * PAGE_SIZE);
        assert!(read(&bytes).is_empty());
    }

    #[test]
    fn keys_out_of_order_and_twice_named_buckets_are_refused() {
        let mut db = BoltWriter::measure();
        let mut b = db.bucket(b"key");
        b.put(b"b", b"").unwrap();
        assert!(b.put(b"a", b"").is_err());
        assert!(b.put(b"b", b"").is_err());
        assert!(b.put(b"", b"").is_err());
        b.finish().unwrap();
        db.bucket(b"key").finish().unwrap();
        assert!(db.finish().is_err());
    }

    /// One bucket of a few hundred keys: more than one leaf, so the tree has a branch.
    fn sample() -> Vec<u8> {
        let entries = (0..300u32).map(|i| (i.to_be_bytes().to_vec(), vec![b'v'; 40])).collect();
        write(&vec![(b"key".to_vec(), entries)])
    }

    /// Flips one byte of the meta page `page` inside its checksummed body.
    fn damage_meta(bytes: &mut [u8], page: usize) {
        bytes[page * PAGE_SIZE + 16 + 20] ^= 0xff;
    }

    #[test]
    fn a_damaged_meta_page_falls_back_to_the_other_and_two_are_refused() {
        let good = sample();
        let expected = read(&good);
        for page in [0, 1] {
            let mut bytes = good.clone();
            damage_meta(&mut bytes, page);
            assert_eq!(read(&bytes), expected, "meta page {page} damaged: the other one reads");
        }
        let mut bytes = good.clone();
        damage_meta(&mut bytes, 0);
        damage_meta(&mut bytes, 1);
        let err = open(&bytes, bytes.len() as u64).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("invalid database: neither meta page is valid"));
    }

    #[test]
    fn a_truncated_file_and_a_page_pointing_outside_it_are_errors() {
        let bytes = sample();
        let short = bytes.len() as u64 - PAGE_SIZE as u64;
        let err = open(&bytes, short).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with("invalid database: the file is truncated"), "{err}");

        // The `key` bucket's root, named in the top-level leaf, pointed past the pages in use.
        let mut bytes = sample();
        let pages = (bytes.len() / PAGE_SIZE) as u64;
        let top = bytes.len() - PAGE_SIZE;
        let at = bytes[top..].windows(3).position(|w| w == b"key").unwrap() + top + 3;
        bytes[at..at + 8].copy_from_slice(&(pages + 5).to_le_bytes());
        let file = open(&bytes, bytes.len() as u64).unwrap();
        let bucket = file.bucket(b"key").unwrap().unwrap();
        let err = file.for_each::<BoltError>(&bucket, &mut |_| Ok(true)).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("invalid database: a reference to page {} outside the {pages} pages in use", pages + 5)
        );
    }

    #[test]
    fn a_visit_that_stops_is_not_called_again() {
        let bytes = sample();
        let file = open(&bytes, bytes.len() as u64).unwrap();
        let bucket = file.bucket(b"key").unwrap().unwrap();
        let mut seen = Vec::new();
        file.for_each::<BoltError>(&bucket, &mut |e| {
            if let Entry::Value(k, _) = e {
                seen.push(k.to_vec());
            }
            Ok(seen.len() < 5)
        })
        .unwrap();
        assert_eq!(seen, (0..5u32).map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>());
        assert!(file.bucket(b"nope").unwrap().is_none());
    }
}
