//! A raw gRPC Watch stream for tests: requests in, responses out, with the waits a test needs.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use actcd_proto::etcdserverpb::{watch_request, WatchCreateRequest, WatchRequest, WatchResponse};

use crate::harness::Server;

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
