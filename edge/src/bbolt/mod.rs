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
    //! of order and a bucket named twice are refused.

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

    fn read(bytes: &[u8]) -> Buckets {
        let mut tmp = tempfile::tempfile().unwrap();
        tmp.write_all(bytes).unwrap();
        let file = BoltFile::open(tmp, bytes.len() as u64).unwrap();
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
}
