//! The Watch RPC's route, wired by hand: what tonic's generated `WatchServer` does, with
//! [`WatchReply`] as the response type instead of prost's `WatchResponse`, so that an event
//! the watch tree encoded once is sent as it is to every watcher (see
//! `actcd_proto::watch_reply`). The bytes on the wire are etcd's, so clients see no
//! difference; only the server's generated route is not used.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::{http, Body, BoxFuture, BoxStream, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use actcd_proto::codec::LeanCodec;
use actcd_proto::etcdserverpb::watch_server::SERVICE_NAME;
use actcd_proto::etcdserverpb::WatchRequest;
use actcd_proto::watch_reply::WatchReply;

use crate::grpc::watch::WatchService;

/// The one method of etcd's Watch service.
const WATCH_PATH: &str = "/etcdserverpb.Watch/Watch";

/// The Watch service as a route of the gRPC router.
#[derive(Clone)]
pub struct WatchRoute {
    service: Arc<WatchService>,
    /// The largest request it decodes (the other services' limit too).
    max_decoding_message_size: usize,
}

impl WatchRoute {
    /// Routes Watch calls to `service`, decoding requests of up to `max_decoding_message_size`.
    pub fn new(service: Arc<WatchService>, max_decoding_message_size: usize) -> Self {
        Self { service, max_decoding_message_size }
    }
}

impl NamedService for WatchRoute {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> Service<http::Request<B>> for WatchRoute
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != WATCH_PATH {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let call = WatchCall(Arc::clone(&self.service));
        let max = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(LeanCodec::<WatchReply, WatchRequest>::default())
                .apply_max_message_size_config(Some(max), None);
            Ok(grpc.streaming(call, request).await)
        })
    }
}

/// One Watch call, handed to the service.
struct WatchCall(Arc<WatchService>);

impl StreamingService<WatchRequest> for WatchCall {
    type Response = WatchReply;
    type ResponseStream = BoxStream<WatchReply>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<WatchRequest>>) -> Self::Future {
        let service = Arc::clone(&self.0);
        Box::pin(async move { service.watch(request) })
    }
}
