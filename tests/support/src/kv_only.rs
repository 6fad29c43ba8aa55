//! An in-process gRPC server that serves only KV puts and ranges (every other RPC, and every
//! other service, answers UNIMPLEMENTED), and that can be shut down mid-run: what the load
//! client's bad-input paths run against, with no server binary.

use actcd_proto::etcdserverpb::kv_server::{Kv, KvServer};
use actcd_proto::etcdserverpb::{PutRequest, PutResponse, RangeRequest, RangeResponse};
use std::net::SocketAddr;
use std::time::Duration;
use tonic::{Request, Response, Status};

struct KvOnly;

#[tonic::async_trait]
impl Kv for KvOnly {
    async fn range(&self, _: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        Ok(Response::new(RangeResponse::default()))
    }

    async fn put(&self, _: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        Ok(Response::new(PutResponse::default()))
    }
}

/// Serves on a free loopback port until `shutdown` resolves; returns once it listens. Panics
/// when no loopback port can be bound (a test cannot go on then).
pub async fn serve(shutdown: tokio::sync::oneshot::Receiver<()>) -> SocketAddr {
    let port = crate::server::free_port().expect("a free loopback port");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(KvServer::new(KvOnly))
            .serve_with_shutdown(addr, async {
                let _ = shutdown.await;
            })
            .await;
    });
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    addr
}
