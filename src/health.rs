//! grpc.health.v1, which etcd registers on its client port too.

use tonic::{Request, Response, Status};

use actcd_proto::health::health_check_response::ServingStatus;
use actcd_proto::health::health_server::Health;
use actcd_proto::health::{HealthCheckRequest, HealthCheckResponse};

/// Answers SERVING for the whole server ("") and for every etcd service name.
pub struct HealthService;

const SERVICES: [&str; 7] = [
    "",
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance",
    "etcdserverpb.Auth",
];

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if !SERVICES.contains(&request.get_ref().service.as_str()) {
            return Err(Status::not_found("unknown service"));
        }
        Ok(Response::new(HealthCheckResponse { status: ServingStatus::Serving as i32 }))
    }
}
