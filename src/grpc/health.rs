//! grpc.health.v1, which etcd registers on its client port too.

use tonic::{Request, Response, Status};

use actcd_proto::health::health_check_response::ServingStatus;
use actcd_proto::health::health_server::Health;
use actcd_proto::health::{HealthCheckRequest, HealthCheckResponse};

use actcd_proto::services::is_etcd_service;

/// Answers SERVING for the whole server ("") and for every etcd service name.
pub struct HealthService;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = request.get_ref().service.as_str();
        if !service.is_empty() && !is_etcd_service(service) {
            return Err(Status::not_found("unknown service"));
        }
        Ok(Response::new(HealthCheckResponse { status: ServingStatus::Serving as i32 }))
    }
}
