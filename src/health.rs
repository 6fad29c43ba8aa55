//! grpc.health.v1, which etcd registers on its client port too.

use tonic::{Request, Response, Status};

use actcd_proto::health::health_check_response::ServingStatus;
use actcd_proto::health::health_server::Health;
use actcd_proto::health::{HealthCheckRequest, HealthCheckResponse};

/// Answers SERVING for the whole server ("") and for every etcd service name.
pub struct HealthService;

/// etcd's gRPC services, by their full names (what the health service answers for, and what
/// a call to an unknown service is told apart from).
pub const ETCD_SERVICES: [&str; 6] = [
    "etcdserverpb.KV",
    "etcdserverpb.Watch",
    "etcdserverpb.Lease",
    "etcdserverpb.Cluster",
    "etcdserverpb.Maintenance",
    "etcdserverpb.Auth",
];

/// The standard health service's own name.
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.get_ref().service.as_str();
        if !service.is_empty() && !ETCD_SERVICES.contains(&service) {
            return Err(Status::not_found("unknown service"));
        }
        Ok(Response::new(HealthCheckResponse { status: ServingStatus::Serving as i32 }))
    }
}
