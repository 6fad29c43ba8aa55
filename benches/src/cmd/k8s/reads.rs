//! The reads that reach etcd: informers' paginated lists (pages of `--page-size` at the revision
//! of the first page, as the continue token pins it), each checked for consistency (the pages'
//! keys ascend and add up to the first page's count, the objects at that revision); and the
//! consistent read from cache (a Range of one key of the type for the current revision, then
//! waiting until the watch stream has seen it).

use super::resources::{prefix, watched, Resource};
use super::store;
use super::watch::Cache;
use crate::conn::{Conn, OpError};
use crate::report::Recorder;
use crate::runner::Worker;
use actcd_proto::etcdserverpb::kv_client::KvClient;
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Lists finished and checked, and those whose pages disagreed with their first page's count
/// or went backwards.
#[derive(Debug, Default)]
pub struct ListChecks {
    pub checked: AtomicU64,
    pub inconsistent: AtomicU64,
}

/// The type request `i` reads: every type in turn.
fn type_of(i: u64) -> Resource {
    let types: Vec<Resource> = watched().collect();
    types[(i % types.len() as u64) as usize]
}

/// Lists every type in turn, page by page (each page's latency in `pages`), `page` objects a page.
pub struct Lister {
    pub kv: KvClient<Conn>,
    pub page: (i64, Duration),
    pub pages: Arc<Recorder>,
    pub checks: Arc<ListChecks>,
}

impl Lister {
    async fn list(&mut self, resource: &Resource) -> Result<(), OpError> {
        let checks = &self.checks;
        let inconsistent = |why: String| {
            checks.inconsistent.fetch_add(1, Ordering::Relaxed);
            OpError::new(format!("inconsistent list: {why}"))
        };
        let (mut last, mut listed): (Option<Bytes>, i64) = (None, 0);
        let (pinned, expected) =
            store::list(&mut self.kv, &prefix(resource), self.page, Some(&self.pages), |page| {
                for kv in &page.kvs {
                    if last.as_ref().is_some_and(|l| l[..] >= kv.key[..]) {
                        return Err(inconsistent("keys went backwards between pages".to_string()));
                    }
                    last = Some(kv.key.clone());
                }
                listed += page.kvs.len() as i64;
                Ok(())
            })
            .await?;
        if expected != listed {
            let name = resource.name;
            return Err(inconsistent(format!(
                "{name} pages listed {listed} objects at revision {pinned}, its count is {expected}"
            )));
        }
        checks.checked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Worker for Lister {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        (0, async move { self.list(&type_of(i)).await })
    }
}

/// Consistent reads from the watch cache, of each type in turn.
pub struct FreshReader {
    pub kv: KvClient<Conn>,
    pub cache: Arc<Cache>,
}

impl Worker for FreshReader {
    fn call(&mut self, i: u64) -> (usize, impl Future<Output = Result<(), OpError>> + Send + '_) {
        let prefix = prefix(&type_of(i));
        (0, async move {
            // The apiserver's GetCurrentResourceVersionFromStorage: a list of one object.
            let page = store::list_page(&mut self.kv, &prefix, prefix.clone(), 1, 0).await?;
            self.cache.wait_fresh(page.header.map_or(0, |h| h.revision)).await.map_err(OpError::new)
        })
    }
}
