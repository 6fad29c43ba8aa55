//! A gRPC status as grpc-gateway answers it in etcd 3.4: its JSON error body, and the HTTP
//! status its version there (1.9) gives each code.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tonic::{Code, Status};

/// grpc-gateway's error body, with the HTTP status its version in etcd 3.4 gives the code.
pub fn error(status: &Status) -> Response {
    let text = serde_json::to_string(status.message()).unwrap_or_else(|_| "\"\"".to_string());
    let body = format!(r#"{{"error":{text},"message":{text},"code":{}}}"#, status.code() as i32);
    (http_status(status.code()), [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// grpc-gateway 1.9's HTTPStatusFromCode (etcd 3.4's).
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
