//! A raw gRPC Watch stream for tests: requests in, responses out, with the waits a test needs.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use actcd_proto::etcdserverpb::{watch_request, WatchCreateRequest, WatchRequest, WatchResponse};

use crate::harness::Server;

/// A create of the keys from `key` to `end` (etcd's range rule: "" one key, "\0" all after it),
/// from revision `start` (0: now).
pub fn create(key: impl AsRef<[u8]>, end: impl AsRef<[u8]>, start: i64) -> WatchCreateRequest {
    WatchCreateRequest {
        key: key.as_ref().to_vec().into(),
        range_end: end.as_ref().to_vec().into(),
        start_revision: start,
        ..Default::default()
    }
}

/// One raw Watch stream: requests in, responses out.
pub struct RawStream {
    pub requests: mpsc::Sender<WatchRequest>,
    pub responses: Streaming<WatchResponse>,
}

impl RawStream {
    /// Opens a stream with its first create already queued: a server sends the response
    /// headers only with its first message, so opening an empty stream would wait forever.
    pub async fn open(server: &Server, first: WatchCreateRequest) -> Self {
        let (requests, rx) = mpsc::channel(16);
        let create = WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(first)) };
        requests.send(create).await.unwrap();
        let responses =
            server.watch_client().await.watch(ReceiverStream::new(rx)).await.unwrap().into_inner();
        Self { requests, responses }
    }

    /// Opens a stream and waits until its create is answered: its two halves, for a test
    /// that reads the responses in a task of its own.
    pub async fn created(
        server: &Server,
        first: WatchCreateRequest,
    ) -> (mpsc::Sender<WatchRequest>, Streaming<WatchResponse>) {
        let mut stream = Self::open(server, first).await;
        stream.first_created(&mut Vec::new()).await;
        (stream.requests, stream.responses)
    }

    /// The created response of the create `open` queued.
    pub async fn first_created(&mut self, seen: &mut Vec<WatchResponse>) -> WatchResponse {
        loop {
            let resp = self.next(Duration::from_secs(10)).await.expect("created response");
            if resp.created {
                return resp;
            }
            seen.push(resp);
        }
    }

    pub async fn send(&self, req: watch_request::RequestUnion) {
        self.requests.send(WatchRequest { request_union: Some(req) }).await.unwrap();
    }

    /// Creates a watch and returns its created response (the Go client's one-at-a-time way).
    pub async fn create(&mut self, req: WatchCreateRequest, seen: &mut Vec<WatchResponse>) -> WatchResponse {
        self.send(watch_request::RequestUnion::CreateRequest(req)).await;
        loop {
            let resp = self.next(Duration::from_secs(10)).await.expect("created response");
            if resp.created {
                return resp;
            }
            seen.push(resp);
        }
    }

    pub async fn next(&mut self, wait: Duration) -> Option<WatchResponse> {
        tokio::time::timeout(wait, self.responses.message()).await.ok()?.ok()?
    }

    /// Everything that arrives until the stream is quiet for `quiet`.
    pub async fn drain(&mut self, quiet: Duration) -> Vec<WatchResponse> {
        let mut out = Vec::new();
        while let Some(r) = self.next(quiet).await {
            out.push(r);
        }
        out
    }
}
