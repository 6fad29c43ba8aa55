//! A read-only reader of bbolt files, the B+tree file etcd keeps its backend in
//! (`member/snap/db`, and what `etcdctl snapshot save` writes). No crate reads etcd's files:
//! etcd on Linux runs bbolt with `NoFreelistSync`, so its meta names no freelist page
//! (`u64::MAX`), which bbolt-rs refuses and nut overflows on.
//!
//! The file's layout is drawn in [`super::format`].
//!
//! Pages are read one at a time with positioned reads, so a file of any size costs one
//! page per tree level in memory. Every offset is checked against the page and the file: a
//! damaged file is an error, never a panic or a loop.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::format::{
    fnv1a64, BRANCH, BUCKET_HEADER, BUCKET_LEAF, ELEMENT, LEAF, MAGIC, META_LEN, PAGE_HEADER, VERSION,
};

/// Why a file cannot be read as bbolt.
#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    /// Reading the file failed.
    #[error("reading the database: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a consistent bbolt file.
    #[error("invalid database: {0}")]
    Corrupt(String),
}

/// Deeper than any real tree (bbolt splits pages at a fill of a quarter page or more): a
/// branch that points back up is caught here.
const MAX_DEPTH: usize = 64;

fn corrupt(what: impl Into<String>) -> BoltError {
    BoltError::Corrupt(what.into())
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, BoltError> {
    let b = bytes.get(at..at + 2).ok_or_else(|| corrupt("a page ends inside a field"))?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, BoltError> {
    let b = bytes.get(at..at + 4).ok_or_else(|| corrupt("a page ends inside a field"))?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, BoltError> {
    let b = bytes.get(at..at + 8).ok_or_else(|| corrupt("a page ends inside a field"))?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// A meta page's fields that reading needs.
#[derive(Debug, Clone, Copy)]
struct Meta {
    page_size: u32,
    root: u64,
    pages: u64,
    txid: u64,
}

fn meta(bytes: &[u8]) -> Result<Meta, BoltError> {
    let body = bytes.get(PAGE_HEADER..PAGE_HEADER + META_LEN).ok_or_else(|| corrupt("short meta page"))?;
    if u32_at(body, 0)? != MAGIC {
        return Err(corrupt("the meta page has no bbolt magic"));
    }
    if u32_at(body, 4)? != VERSION {
        return Err(corrupt("the meta page names another bbolt version"));
    }
    if fnv1a64(&body[..56]) != u64_at(body, 56)? {
        return Err(corrupt("the meta page's checksum does not match"));
    }
    Ok(Meta {
        page_size: u32_at(body, 8)?,
        root: u64_at(body, 16)?,
        pages: u64_at(body, 40)?,
        txid: u64_at(body, 48)?,
    })
}

/// Where a bucket's tree is: a page of its own, or inline in its parent's value.
#[derive(Debug, Clone)]
pub enum Bucket {
    /// The root page of the bucket's tree.
    Page(u64),
    /// The bucket's one leaf page, carried in its parent's value.
    Inline(Vec<u8>),
}

/// One entry of a leaf: a key and its value, or a key that names a nested bucket.
pub enum Entry<'a> {
    /// A key and its value.
    Value(&'a [u8], &'a [u8]),
    /// A key that names a nested bucket.
    Bucket(&'a [u8], Bucket),
}

/// An open bbolt file, read with positioned reads.
pub struct BoltFile {
    file: File,
    /// Bytes of the database: the file's length less any trailer (a snapshot's SHA-256).
    len: u64,
    page_size: u64,
    root: u64,
    pages: u64,
}

impl BoltFile {
    /// Opens the first `len` bytes of `file` as a bbolt database.
    pub fn open(file: File, len: u64) -> Result<BoltFile, BoltError> {
        let read = |at: u64, n: usize| -> Result<Vec<u8>, BoltError> {
            if at + n as u64 > len {
                return Err(corrupt("the file ends before its meta pages"));
            }
            let mut buf = vec![0; n];
            file.read_exact_at(&mut buf, at)?;
            Ok(buf)
        };
        let head = PAGE_HEADER + META_LEN;
        let first = meta(&read(0, head)?);
        // The page size is in the meta; when the first is damaged, bbolt probes the second
        // at the sizes a page can have.
        let page_size = match &first {
            Ok(m) => u64::from(m.page_size),
            Err(_) => (10..=16)
                .map(|shift| 1u64 << shift)
                .find(|size| {
                    read(*size, head)
                        .ok()
                        .is_some_and(|b| meta(&b).is_ok_and(|m| u64::from(m.page_size) == *size))
                })
                .ok_or_else(|| corrupt("neither meta page is valid"))?,
        };
        if !(512..=1 << 16).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(corrupt(format!("page size {page_size}")));
        }
        let second = meta(&read(page_size, head)?);
        let chosen = match (first, second) {
            (Ok(a), Ok(b)) => {
                if b.txid > a.txid {
                    b
                } else {
                    a
                }
            }
            (Ok(m), Err(_)) | (Err(_), Ok(m)) => m,
            (Err(e), Err(_)) => return Err(e),
        };
        if chosen.pages.saturating_mul(page_size) > len {
            return Err(corrupt(format!(
                "the file is truncated: its meta names {} pages of {page_size} bytes, the file holds {len} bytes",
                chosen.pages
            )));
        }
        Ok(BoltFile { file, len, page_size, root: chosen.root, pages: chosen.pages })
    }

    /// The top-level bucket tree.
    pub fn root(&self) -> Bucket {
        Bucket::Page(self.root)
    }

    /// The top-level bucket `name`, if the file has one.
    pub fn bucket(&self, name: &[u8]) -> Result<Option<Bucket>, BoltError> {
        let mut found = None;
        self.for_each::<BoltError>(&self.root(), &mut |entry| {
            if let Entry::Bucket(key, bucket) = entry {
                if key == name {
                    found = Some(bucket);
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        Ok(found)
    }

    /// Visits `bucket`'s entries in key order until `visit` returns false.
    pub fn for_each<E: From<BoltError>>(
        &self,
        bucket: &Bucket,
        visit: &mut dyn FnMut(Entry<'_>) -> Result<bool, E>,
    ) -> Result<(), E> {
        match bucket {
            Bucket::Page(id) => self.walk(*id, 0, visit).map(|_| ()),
            Bucket::Inline(page) => leaf(page, visit).map(|_| ()),
        }
    }

    /// Reads page `id` whole, with its overflow pages.
    fn page(&self, id: u64) -> Result<Vec<u8>, BoltError> {
        if id < 2 || id >= self.pages {
            return Err(corrupt(format!("a reference to page {id} outside the {} pages in use", self.pages)));
        }
        let at = id * self.page_size;
        let mut header = [0u8; PAGE_HEADER];
        self.file.read_exact_at(&mut header, at)?;
        if u64_at(&header, 0)? != id {
            return Err(corrupt(format!("page {id} holds the header of page {}", u64_at(&header, 0)?)));
        }
        let span = (u64::from(u32_at(&header, 12)?) + 1).saturating_mul(self.page_size);
        if id.saturating_add(span / self.page_size) > self.pages || at + span > self.len {
            return Err(corrupt(format!("page {id} overflows past the pages in use")));
        }
        let mut page = vec![0; span as usize];
        self.file.read_exact_at(&mut page, at)?;
        Ok(page)
    }

    /// Returns false once `visit` has asked to stop.
    fn walk<E: From<BoltError>>(
        &self,
        id: u64,
        depth: usize,
        visit: &mut dyn FnMut(Entry<'_>) -> Result<bool, E>,
    ) -> Result<bool, E> {
        if depth > MAX_DEPTH {
            return Err(corrupt("the tree is deeper than any bbolt tree: a branch loops").into());
        }
        let page = self.page(id)?;
        let flags = u16_at(&page, 8)?;
        if flags == LEAF {
            return leaf(&page, visit);
        }
        if flags != BRANCH {
            return Err(
                corrupt(format!("page {id} is neither a branch nor a leaf (flags {flags:#x})")).into()
            );
        }
        let children: Vec<u64> = (0..usize::from(u16_at(&page, 10)?))
            .map(|i| u64_at(&page, PAGE_HEADER + i * ELEMENT + 8))
            .collect::<Result<_, _>>()?;
        drop(page);
        for child in children {
            if !self.walk(child, depth + 1, visit)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The entries of one leaf page (a page of the file or an inline bucket's).
fn leaf<E: From<BoltError>>(
    page: &[u8],
    visit: &mut dyn FnMut(Entry<'_>) -> Result<bool, E>,
) -> Result<bool, E> {
    if u16_at(page, 8)? != LEAF {
        return Err(corrupt("an inline bucket that is not a leaf").into());
    }
    for i in 0..usize::from(u16_at(page, 10)?) {
        let at = PAGE_HEADER + i * ELEMENT;
        let (flags, pos, ksize, vsize) =
            (u32_at(page, at)?, u32_at(page, at + 4)?, u32_at(page, at + 8)?, u32_at(page, at + 12)?);
        let key_at = at + pos as usize;
        let value_at = key_at + ksize as usize;
        let key = page.get(key_at..value_at).ok_or_else(|| corrupt("a key past its page's end"))?;
        let value = page
            .get(value_at..value_at + vsize as usize)
            .ok_or_else(|| corrupt("a value past its page's end"))?;
        let go_on = if flags & BUCKET_LEAF == 0 {
            visit(Entry::Value(key, value))?
        } else {
            let root = u64_at(value, 0)?;
            let bucket = if root == 0 {
                Bucket::Inline(
                    value.get(BUCKET_HEADER..).ok_or_else(|| corrupt("a short inline bucket"))?.to_vec(),
                )
            } else {
                Bucket::Page(root)
            };
            visit(Entry::Bucket(key, bucket))?
        };
        if !go_on {
            return Ok(false);
        }
    }
    Ok(true)
}
