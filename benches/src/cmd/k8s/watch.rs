//! The watch cache's view of the store: one Watch stream (the apiserver's etcd client puts all of
//! its watches on one stream) with one watch per type, from the revision the load starts at,
//! with prev_kv and progress_notify as the cacher asks; the events counted by kind; and the
//! consistent read from cache: a reader that needs revision R waits until the stream has seen
//! R, while a requester sends RequestProgress every 100 ms as long as anyone waits (the
//! apiserver's conditionalProgressRequester).

use crate::conn::{status_text, watch_client, Conn};
use actcd_proto::etcdserverpb::watch_request::RequestUnion;
use actcd_proto::etcdserverpb::{WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse};
use actcd_proto::key_range::prefix_end;
use actcd_proto::mvccpb::event::EventType;
use bytes::Bytes;
use futures::channel::mpsc;
use futures::SinkExt;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tonic::Streaming;

/// How often the requester asks for progress while readers wait (the apiserver's period).
pub const PROGRESS_PERIOD: Duration = Duration::from_millis(100);

/// Requests queued to the stream: the creates go one at a time and progress requests are sent
/// with `try_send`, so when the queue is full a progress request is already waiting to go out
/// and answers the waiters as well; the new one is dropped.
const REQUEST_QUEUE: usize = 4;

/// What the stream delivered: put events of new keys (create_revision = mod_revision) and of
/// existing ones, delete events, update and delete events without the prev_kv asked for,
/// progress notifications (answers to RequestProgress and periodic ones), the RequestProgress
/// sent, and why the stream ended early, if it did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WatchCounts {
    pub created: u64,
    pub updated: u64,
    pub deleted: u64,
    pub missing_prev_kv: u64,
    pub progress: u64,
    pub progress_requests: u64,
    pub error: Option<String>,
}

/// The stream's state that the readers share.
pub struct Cache {
    revision: watch::Sender<i64>,
    waiting: AtomicUsize,
    wake: Notify,
    counts: Mutex<WatchCounts>,
}

impl Cache {
    /// Waits until the stream has seen `revision` (events or a progress notification at or
    /// after it), asking for progress while it waits. The caller bounds the wait.
    pub async fn wait_fresh(&self, revision: i64) -> Result<(), String> {
        let mut seen = self.revision.subscribe();
        if *seen.borrow() >= revision {
            return Ok(());
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        let result =
            seen.wait_for(|&r| r >= revision).await.map(|_| ()).map_err(|_| {
                self.count().error.clone().unwrap_or_else(|| "the watch stream ended".to_string())
            });
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        result
    }

    fn fail(&self, why: String) {
        self.count().error.get_or_insert(why);
    }

    fn count(&self) -> std::sync::MutexGuard<'_, WatchCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn counts(&self) -> WatchCounts {
        self.count().clone()
    }

    fn seen(&self, r: &WatchResponse) {
        if r.events.is_empty() {
            if !r.created {
                self.count().progress += 1;
                self.advance(r.header.as_ref().map_or(0, |h| h.revision));
            }
            return;
        }
        let mut newest = 0;
        let mut c = self.count();
        for e in &r.events {
            let Some(kv) = &e.kv else { continue };
            newest = newest.max(kv.mod_revision);
            let new = kv.create_revision == kv.mod_revision;
            if e.r#type == EventType::Delete as i32 {
                c.deleted += 1;
            } else if new {
                c.created += 1;
            } else {
                c.updated += 1;
            }
            if !(e.r#type == EventType::Put as i32 && new) && e.prev_kv.is_none() {
                c.missing_prev_kv += 1;
            }
        }
        drop(c);
        self.advance(newest);
    }

    fn advance(&self, revision: i64) {
        self.revision.send_if_modified(|r| {
            let newer = revision > *r;
            if newer {
                *r = revision;
            }
            newer
        });
    }
}

/// The open stream: its shared state, and the tasks reading it and asking for progress.
pub struct WatchCache {
    pub cache: Arc<Cache>,
    reader: JoinHandle<()>,
    requester: JoinHandle<()>,
}

impl WatchCache {
    /// Opens the stream on `conn` and one watch per prefix from `from` on, each created before
    /// the next is sent (as clientv3 does), within `timeout` each.
    pub async fn open(conn: Conn, prefixes: &[Bytes], from: i64, timeout: Duration) -> Result<Self, String> {
        let (mut tx, rx) = mpsc::channel(REQUEST_QUEUE);
        let mut creates = prefixes.iter().map(|prefix| WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: prefix.clone(),
                range_end: Bytes::from(prefix_end(prefix)),
                start_revision: from,
                progress_notify: true,
                prev_kv: true,
                ..Default::default()
            })),
        });
        let closed = || "the watch stream closed".to_string();
        // etcd sends a Watch call's response headers with its first message, so the first
        // create must be queued before the call can return.
        if let Some(first) = creates.next() {
            tx.send(first).await.map_err(|_| closed())?;
        }
        let mut responses = tokio::time::timeout(timeout, watch_client(conn).watch(rx))
            .await
            .map_err(|_| format!("no Watch stream within {timeout:?}"))?
            .map_err(|s| format!("Watch: {}", status_text(&s)))?
            .into_inner();
        let cache = Arc::new(Cache {
            revision: watch::channel(from - 1).0,
            waiting: AtomicUsize::new(0),
            wake: Notify::new(),
            counts: Mutex::default(),
        });
        for _ in prefixes {
            let created = async {
                loop {
                    match responses.message().await {
                        Ok(Some(r)) if r.created => return Ok(()),
                        Ok(Some(r)) if r.canceled => {
                            return Err(format!("watch refused: {}", r.cancel_reason))
                        }
                        Ok(Some(r)) => cache.seen(&r),
                        Ok(None) => return Err(closed()),
                        Err(s) => return Err(format!("watch: {}", status_text(&s))),
                    }
                }
            };
            tokio::time::timeout(timeout, created)
                .await
                .map_err(|_| format!("no watch created within {timeout:?}"))??;
            if let Some(next) = creates.next() {
                tx.send(next).await.map_err(|_| closed())?;
            }
        }
        let reader = tokio::spawn(read(responses, cache.clone()));
        let requester = tokio::spawn(request_progress(tx, cache.clone()));
        Ok(Self { cache, reader, requester })
    }

    pub fn close(self) {
        self.reader.abort();
        self.requester.abort();
    }
}

async fn read(mut responses: Streaming<WatchResponse>, cache: Arc<Cache>) {
    loop {
        match responses.message().await {
            Ok(Some(r)) if r.canceled => {
                let why = format!(
                    "watch {} canceled (compacted at {}): {}",
                    r.watch_id, r.compact_revision, r.cancel_reason
                );
                return cache.fail(why);
            }
            Ok(Some(r)) => cache.seen(&r),
            Ok(None) => return cache.fail("the server closed the watch stream".to_string()),
            Err(s) => return cache.fail(format!("watch stream: {}", status_text(&s))),
        }
    }
}

async fn request_progress(mut tx: mpsc::Sender<WatchRequest>, cache: Arc<Cache>) {
    let progress =
        WatchRequest { request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})) };
    loop {
        while cache.waiting.load(Ordering::Relaxed) == 0 {
            cache.wake.notified().await;
        }
        match tx.try_send(progress.clone()) {
            Ok(()) => cache.count().progress_requests += 1,
            Err(e) if e.is_disconnected() => return,
            Err(_) => {}
        }
        tokio::time::sleep(PROGRESS_PERIOD).await;
    }
}
