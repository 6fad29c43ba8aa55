//! The reads that reach etcd: informers' paginated lists (pages of `--page-size` at the revision
//! of the first page, as the continue token pins it), each checked for consistency (the pages'
//! keys ascend and add up to the first page's count, the objects at that revision); and the
//! consistent read from cache (a Range of one key of the type for the current revision, then
//! waiting until the watch stream has seen it).

use super::resources::{prefix, watched, Resource};
use super::store;
use super::watch::Cache;
use crate::conn::Conn;
use crate::report::Recorder;
use crate::runner::{OpError, Worker};
use actcd_proto::etcdserverpb::kv_client::KvClient;
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Lists whose pages were checked, and those that did not add up.
#[derive(Debug, Default)]
pub struct ListChecks {
    /// Lists finished and checked.
    pub checked: AtomicU64,
    /// Lists whose pages disagreed with their first page's count or went backwards.
    pub inconsistent: AtomicU64,
}

/// Lists every type in turn, page by page.
pub struct Lister {
    /// The client's KV.
    pub kv: KvClient<Conn>,
    /// Objects per page.
    pub page_size: i64,
    /// Each page's latency.
    pub pages: Arc<Recorder>,
    /// The checks' tallies.
    pub checks: Arc<ListChecks>,
    /// The client's number (its shard in `pages`).
    pub client: usize,
}

impl Lister {
    /// Lists `resource` fully.
    pub async fn list(&mut self, resource: &Resource) -> Result<(), OpError> {
        let prefix = prefix(resource);
        let mut from = prefix.clone();
        let mut pinned = 0;
        let mut expected = None;
        let mut listed: u64 = 0;
        let mut last: Option<Bytes> = None;
        loop {
            let sent = Instant::now();
            let page =
                match store::list_page(&mut self.kv, &prefix, from.clone(), self.page_size, pinned).await {
                    Ok(p) => {
                        self.pages.ok(self.client, sent, Instant::now());
                        p
                    }
                    Err(e) => {
                        self.pages.err(self.client, &e.text);
                        return Err(e);
                    }
                };
            if pinned == 0 {
                pinned = page.header.as_ref().map_or(0, |h| h.revision);
                expected = Some(page.count);
            }
            for kv in &page.kvs {
                if last.as_ref().is_some_and(|l| l[..] >= kv.key[..]) {
                    return Err(self.inconsistent("keys went backwards between pages"));
                }
                last = Some(kv.key.clone());
            }
            listed += page.kvs.len() as u64;
            match page.kvs.last() {
                Some(kv) if page.more => from = store::after(&kv.key),
                _ => break,
            }
        }
        if expected != Some(listed as i64) {
            let why = format!(
                "{} pages listed {listed} objects at revision {pinned}, its count is {expected:?}",
                resource.name
            );
            return Err(self.inconsistent(&why));
        }
        self.checks.checked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn inconsistent(&self, why: &str) -> OpError {
        self.checks.inconsistent.fetch_add(1, Ordering::Relaxed);
        OpError::new(format!("inconsistent list: {why}"))
    }
}

impl Worker for Lister {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let types: Vec<Resource> = watched().collect();
        let resource = types[(i % types.len() as u64) as usize];
        (0, async move { self.list(&resource).await })
    }
}

/// Consistent reads from the watch cache, of each type in turn.
pub struct FreshReader {
    /// The client's KV.
    pub kv: KvClient<Conn>,
    /// The watch stream's state.
    pub cache: Arc<Cache>,
}

impl Worker for FreshReader {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let types: Vec<Resource> = watched().collect();
        let prefix = prefix(&types[(i % types.len() as u64) as usize]);
        (0, async move {
            // The apiserver's GetCurrentResourceVersionFromStorage: a list of one object.
            let page = store::list_page(&mut self.kv, &prefix, prefix.clone(), 1, 0).await?;
            let revision = page.header.map_or(0, |h| h.revision);
            self.cache.wait_fresh(revision).await.map_err(OpError::new)
        })
    }
}
