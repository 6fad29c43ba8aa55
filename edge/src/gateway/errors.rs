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

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use tonic::{Code, Status};

    use super::{error, http_status};
    use crate::gateway::tests::answer;

    /// grpc-gateway 1.9's HTTPStatusFromCode, as etcd 3.4 serves it.
    #[test]
    fn each_code_has_grpc_gateways_http_status() {
        for (code, http) in [
            (Code::Ok, 200),
            (Code::Cancelled, 408),
            (Code::Unknown, 500),
            (Code::InvalidArgument, 400),
            (Code::DeadlineExceeded, 504),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::PermissionDenied, 403),
            (Code::ResourceExhausted, 429),
            (Code::FailedPrecondition, 412),
            (Code::Aborted, 409),
            (Code::OutOfRange, 400),
            (Code::Unimplemented, 501),
            (Code::Internal, 500),
            (Code::Unavailable, 503),
            (Code::DataLoss, 500),
            (Code::Unauthenticated, 401),
        ] {
            assert_eq!(http_status(code).as_u16(), http, "{code:?}");
        }
    }

    /// The text goes into the body as a JSON string, whatever it holds.
    #[tokio::test]
    async fn the_error_body_carries_the_text_as_json() {
        let text = "a \"quoted\" line\nand a tab\t\\";
        let (status, _, body) = answer(error(&Status::unavailable(text))).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json, serde_json::json!({"error": text, "message": text, "code": 14}));
    }
}
