//! A writer of bbolt files that streams: the whole file goes out front to back, page by page,
//! while the data is read in key order, with one page per tree level in memory. This is how
//! a snapshot of any size leaves actcd in etcd's format without a copy on disk.
//!
//! # Two passes, one stream
//! The meta pages come first and name the top-level tree's root page and the pages in use,
//! which are known only once the last page is placed. So the same data is given twice:
//! [`BoltWriter::measure`] places every page without writing any, and its [`Layout`] lets
//! [`BoltWriter::stream`] write the metas first and then each page in page order. Both
//! passes must see the same data (a RocksDB snapshot); the second checks that it ended where
//! the first did.
//!
//! # Where pages go
//! ```text
//! page 0, 1   the metas (txid 0 and 1, the same tree)
//! page 2      the freelist, empty: every page is in use
//! 3 ...       each bucket's tree bottom up, buckets in the order given: a leaf is
//!             finished when the next element would not fit it, a branch when the next
//!             child would not; an element larger than a page gets a page with overflow
//! last        the top-level tree, one bucket element per bucket, in name order
//! ```
//! Pages are filled whole. bbolt's own writes split nodes at half a page, but its reader
//! takes any fill, and it re-splits a node the next time it changes it.

use std::io::{self, Write};

use super::format::{
    fnv1a64, BRANCH, BUCKET_HEADER, BUCKET_LEAF, ELEMENT, FREELIST, LEAF, MAGIC, META, META_LEN, PAGE_HEADER,
    PAGE_SIZE, VERSION,
};

/// The freelist's page.
const FREELIST_PAGE: u64 = 2;

/// What the metas name: the top-level tree's root page and the pages in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The top-level tree's root page.
    pub root: u64,
    /// Pages in use; the file is this many pages long.
    pub pages: u64,
}

impl Layout {
    /// The file's length in bytes.
    pub fn bytes(&self) -> u64 {
        self.pages * PAGE_SIZE as u64
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.into())
}

/// One element of a page being filled: a leaf's key and value (with its flags), or a
/// branch's first key of a child and the child's page.
struct Element {
    key: Vec<u8>,
    value: Vec<u8>,
    flags: u32,
    child: u64,
}

impl Element {
    fn size(&self) -> usize {
        ELEMENT + self.key.len() + self.value.len()
    }
}

/// The page being filled at one level of a tree (0: the leaves).
#[derive(Default)]
struct Level {
    elements: Vec<Element>,
    bytes: usize,
    /// Pages of this level finished so far: a level whose one page is never finished
    /// early holds the root.
    finished: u64,
}

/// A bbolt file being measured or written.
pub struct BoltWriter<'w> {
    out: Option<&'w mut dyn Write>,
    expected: Option<Layout>,
    next: u64,
    buckets: Vec<(Vec<u8>, u64)>,
    page: Vec<u8>,
}

impl BoltWriter<'static> {
    /// A first pass: places pages, writes nothing.
    pub fn measure() -> Self {
        BoltWriter {
            out: None,
            expected: None,
            next: FREELIST_PAGE + 1,
            buckets: Vec::new(),
            page: Vec::new(),
        }
    }
}

impl<'w> BoltWriter<'w> {
    /// A second pass into `out`, whose first pass ended at `layout`: the metas and the
    /// freelist are written at once.
    pub fn stream(out: &'w mut dyn Write, layout: Layout) -> io::Result<Self> {
        for txid in 0..2u64 {
            out.write_all(&meta_page(txid, layout))?;
        }
        let mut freelist = vec![0u8; PAGE_SIZE];
        page_header(&mut freelist, FREELIST_PAGE, FREELIST, 0, 0);
        out.write_all(&freelist)?;
        Ok(BoltWriter {
            out: Some(out),
            expected: Some(layout),
            next: FREELIST_PAGE + 1,
            buckets: Vec::new(),
            page: Vec::new(),
        })
    }

    /// Starts the top-level bucket `name`; its keys follow in byte order.
    pub fn bucket(&mut self, name: &[u8]) -> BucketWriter<'_, 'w> {
        BucketWriter { db: self, name: name.to_vec(), tree: Tree::default() }
    }

    /// Writes the top-level tree and returns where the file ended.
    pub fn finish(mut self) -> io::Result<Layout> {
        let mut buckets = std::mem::take(&mut self.buckets);
        buckets.sort();
        if buckets.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(invalid("a bucket name given twice"));
        }
        let mut tree = Tree::default();
        for (name, root) in buckets {
            let mut value = vec![0u8; BUCKET_HEADER];
            value[..8].copy_from_slice(&root.to_le_bytes());
            tree.push(&mut self, Element { key: name, value, flags: BUCKET_LEAF, child: 0 })?;
        }
        let root = tree.finish(&mut self)?;
        let layout = Layout { root, pages: self.next };
        match self.expected {
            Some(expected) if expected != layout => Err(io::Error::other(format!(
                "the data changed between the passes: measured {expected:?}, wrote {layout:?}"
            ))),
            _ => Ok(layout),
        }
    }

    /// Places (and, on the second pass, writes) one page of `elements`; returns its id.
    fn page(&mut self, kind: u16, elements: &[Element]) -> io::Result<u64> {
        let size = PAGE_HEADER + elements.iter().map(Element::size).sum::<usize>();
        let span = size.div_ceil(PAGE_SIZE);
        let id = self.next;
        self.next += span as u64;
        let Some(out) = self.out.as_mut() else { return Ok(id) };
        let count = u16::try_from(elements.len()).map_err(|_| invalid("too many elements for a page"))?;
        let overflow = u32::try_from(span - 1).map_err(|_| invalid("an element too large for a page"))?;
        self.page.clear();
        self.page.resize(span * PAGE_SIZE, 0);
        let page = &mut self.page;
        page_header(page, id, kind, count, overflow);
        let mut data = PAGE_HEADER + elements.len() * ELEMENT;
        for (i, e) in elements.iter().enumerate() {
            let at = PAGE_HEADER + i * ELEMENT;
            let pos = (data - at) as u32;
            let (ksize, vsize) = (e.key.len() as u32, e.value.len() as u32);
            if kind == BRANCH {
                put(page, at, &pos.to_le_bytes());
                put(page, at + 4, &ksize.to_le_bytes());
                put(page, at + 8, &e.child.to_le_bytes());
            } else {
                put(page, at, &e.flags.to_le_bytes());
                put(page, at + 4, &pos.to_le_bytes());
                put(page, at + 8, &ksize.to_le_bytes());
                put(page, at + 12, &vsize.to_le_bytes());
            }
            put(page, data, &e.key);
            put(page, data + e.key.len(), &e.value);
            data += e.key.len() + e.value.len();
        }
        out.write_all(page)?;
        Ok(id)
    }
}

/// One top-level bucket being written.
pub struct BucketWriter<'a, 'w> {
    db: &'a mut BoltWriter<'w>,
    name: Vec<u8>,
    tree: Tree,
}

impl BucketWriter<'_, '_> {
    /// Adds `key` (after every key before it, and not empty, as bbolt requires) with `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if key.is_empty() {
            return Err(invalid("an empty key"));
        }
        if self.tree.last.as_deref().is_some_and(|last| last >= key) {
            return Err(invalid(format!("key {key:02x?} is not after the key before it")));
        }
        self.tree.last = Some(key.to_vec());
        self.tree.push(self.db, Element { key: key.to_vec(), value: value.to_vec(), flags: 0, child: 0 })
    }

    /// Ends the bucket.
    pub fn finish(mut self) -> io::Result<()> {
        let root = std::mem::take(&mut self.tree).finish(self.db)?;
        self.db.buckets.push((self.name, root));
        Ok(())
    }
}

/// A tree built bottom up from elements in key order.
#[derive(Default)]
struct Tree {
    levels: Vec<Level>,
    last: Option<Vec<u8>>,
}

impl Tree {
    fn push(&mut self, db: &mut BoltWriter<'_>, element: Element) -> io::Result<()> {
        self.add(db, 0, element)
    }

    fn add(&mut self, db: &mut BoltWriter<'_>, level: usize, element: Element) -> io::Result<()> {
        if self.levels.len() == level {
            self.levels.push(Level::default());
        }
        let size = element.size();
        let pending = &self.levels[level];
        if !pending.elements.is_empty() && PAGE_HEADER + pending.bytes + size > PAGE_SIZE {
            self.close(db, level)?;
        }
        let pending = &mut self.levels[level];
        pending.bytes += size;
        pending.elements.push(element);
        Ok(())
    }

    /// Finishes the page filling at `level` and hands it to the level above.
    fn close(&mut self, db: &mut BoltWriter<'_>, level: usize) -> io::Result<()> {
        let pending = &mut self.levels[level];
        let elements = std::mem::take(&mut pending.elements);
        pending.bytes = 0;
        pending.finished += 1;
        let id = db.page(if level == 0 { LEAF } else { BRANCH }, &elements)?;
        let first = elements.into_iter().next().map(|e| e.key).unwrap_or_default();
        self.add(db, level + 1, Element { key: first, value: Vec::new(), flags: 0, child: id })
    }

    /// Finishes every level; returns the root page.
    fn finish(mut self, db: &mut BoltWriter<'_>) -> io::Result<u64> {
        if self.levels.is_empty() {
            return db.page(LEAF, &[]);
        }
        let mut level = 0;
        loop {
            let top = level + 1 == self.levels.len();
            if top && self.levels[level].finished == 0 {
                let kind = if level == 0 { LEAF } else { BRANCH };
                return db.page(kind, &self.levels[level].elements);
            }
            self.close(db, level)?;
            level += 1;
        }
    }
}

fn put(page: &mut [u8], at: usize, bytes: &[u8]) {
    page[at..at + bytes.len()].copy_from_slice(bytes);
}

fn page_header(page: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    put(page, 0, &id.to_le_bytes());
    put(page, 8, &flags.to_le_bytes());
    put(page, 10, &count.to_le_bytes());
    put(page, 12, &overflow.to_le_bytes());
}

fn meta_page(txid: u64, layout: Layout) -> Vec<u8> {
    let mut page = vec![0u8; PAGE_SIZE];
    page_header(&mut page, txid, META, 0, 0);
    let body = &mut page[PAGE_HEADER..PAGE_HEADER + META_LEN];
    put(body, 0, &MAGIC.to_le_bytes());
    put(body, 4, &VERSION.to_le_bytes());
    put(body, 8, &(PAGE_SIZE as u32).to_le_bytes());
    // flags (0) at 12, the root bucket's sequence (0) at 24
    put(body, 16, &layout.root.to_le_bytes());
    put(body, 32, &FREELIST_PAGE.to_le_bytes());
    put(body, 40, &layout.pages.to_le_bytes());
    put(body, 48, &txid.to_le_bytes());
    let checksum = fnv1a64(&body[..56]);
    put(body, 56, &checksum.to_le_bytes());
    page
}
