//! Malformed gRPC traffic gets the codes and texts etcd's grpc-go answers with, not tonic's.
//! tonic refuses the same inputs, but with its own words and sometimes another code (a
//! truncated message is INTERNAL to tonic, UNKNOWN "unexpected EOF" to grpc-go), and it serves a
//! request of any content type. What grpc-go answers was read off etcd 3.4.23 by
//! tests/it/hostile_frames.rs, which checks actcd against it case by case.

use tonic::body::Body;
use tonic::{Code, Status};

use actcd_proto::services;

/// grpc-go serves only application/grpc and its `+codec` / `;parameter` forms; anything else
/// is refused before routing with HTTP 415 and INVALID_ARGUMENT (etcd 3.4's older grpc-go
/// resets the stream instead; the newer answer tells the client why).
pub fn refuse_content_type<B>(request: &http::Request<B>) -> Option<http::Response<Body>> {
    let content_type = request.headers().get(http::header::CONTENT_TYPE).map(|v| v.as_bytes()).unwrap_or(b"");
    let grpc = content_type
        .strip_prefix(b"application/grpc")
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';');
    if grpc {
        return None;
    }
    let shown = String::from_utf8_lossy(content_type);
    let status = Status::invalid_argument(format!("invalid gRPC request content-type {shown:?}"));
    let mut response: http::Response<Body> = status.into_http();
    *response.status_mut() = http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
    Some(response)
}

/// Rewrites a trailers-only error answer (a unary call refused before its handler ran) into
/// grpc-go's code and text.
pub fn rewrite_answer(path: &str, response: &mut http::Response<Body>) {
    let headers = response.headers_mut();
    let Some(status) = Status::from_header_map(headers) else { return };
    if let Some(rewritten) = grpc_go_status(path, &status, false) {
        let _ = rewritten.add_header(headers);
    }
}

/// What a bidirectional stream (Watch, LeaseKeepAlive) ends with after its request stream
/// failed: grpc-go's status for a bad message; `None` when the client itself went away.
pub fn stream_receive_error(status: Status) -> Option<Status> {
    if status.code() == Code::Cancelled {
        return None;
    }
    Some(grpc_go_status("", &status, true).unwrap_or(status))
}

/// grpc-go's status for what tonic refused with `status`, or `None` to keep it.
fn grpc_go_status(path: &str, status: &Status, streaming: bool) -> Option<Status> {
    let message = status.message();
    match status.code() {
        Code::OutOfRange => {
            // "Error, decoded message length too large: found N bytes, the limit is: M bytes".
            let rest = message.strip_prefix("Error, decoded message length too large")?;
            let numbers: Vec<&str> =
                rest.split(|c: char| !c.is_ascii_digit()).filter(|n| !n.is_empty()).collect();
            let [found, limit] = numbers[..] else { return None };
            Some(Status::resource_exhausted(format!(
                "grpc: received message larger than max ({found} vs. {limit})"
            )))
        }
        Code::Internal => {
            if let Some(detail) = message.strip_prefix("failed to decode Protobuf message: ") {
                return Some(Status::internal(if streaming {
                    format!("grpc: failed to unmarshal the received message {detail}")
                } else {
                    format!("grpc: error unmarshalling request: {detail}")
                }));
            }
            if message == "Unexpected EOF decoding stream." {
                return Some(Status::unknown("unexpected EOF"));
            }
            if message == "Missing request message." {
                return Some(Status::unknown("EOF"));
            }
            if message
                .starts_with("protocol error: received message with compressed-flag but no grpc-encoding")
            {
                return Some(Status::internal("grpc: compressed flag set with identity or empty encoding"));
            }
            let flag =
                message.strip_prefix("protocol error: received message with invalid compression flag: ")?;
            let flag: String = flag.chars().take_while(char::is_ascii_digit).collect();
            Some(Status::internal(format!("grpc: received unexpected payload format {flag}")))
        }
        Code::Unimplemented if message.is_empty() => Some(unknown_call(path)),
        _ => None,
    }
}

/// grpc-go's answer to a path that names no method of this server.
fn unknown_call(path: &str) -> Status {
    let name = path.strip_prefix('/').unwrap_or(path);
    let Some((service, method)) = name.rsplit_once('/') else {
        return Status::resource_exhausted(format!("malformed method name: {path:?}"));
    };
    if services::service(service).is_some() {
        Status::unimplemented(format!("unknown method {method} for service {service}"))
    } else {
        Status::unimplemented(format!("unknown service {service}"))
    }
}

#[cfg(test)]
mod tests {
    use tonic::body::Body;
    use tonic::{Code, Status};

    use super::{refuse_content_type, rewrite_answer, stream_receive_error};

    fn seen(status: &Status) -> (Code, &str) {
        (status.code(), status.message())
    }

    /// The status in the trailers-only answer tonic would send for `status`, after the rewrite.
    fn rewritten(path: &str, status: Status) -> Status {
        let mut answer: http::Response<Body> = status.into_http();
        rewrite_answer(path, &mut answer);
        Status::from_header_map(answer.headers()).unwrap()
    }

    #[test]
    fn only_grpc_content_types_reach_the_services() {
        let request = |content_type: Option<&str>| {
            let mut request = http::Request::builder();
            if let Some(value) = content_type {
                request = request.header(http::header::CONTENT_TYPE, value);
            }
            request.body(()).unwrap()
        };
        for served in ["application/grpc", "application/grpc+proto", "application/grpc;charset=utf-8"] {
            assert!(refuse_content_type(&request(Some(served))).is_none(), "{served}");
        }
        for (refused, shown) in [
            (Some("application/json"), "application/json"),
            (Some("application/grpcx"), "application/grpcx"),
            (None, ""),
        ] {
            let answer = refuse_content_type(&request(refused)).unwrap();
            assert_eq!(answer.status(), http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
            let status = Status::from_header_map(answer.headers()).unwrap();
            let text = format!("invalid gRPC request content-type {shown:?}");
            assert_eq!(seen(&status), (Code::InvalidArgument, text.as_str()));
        }
    }

    /// tonic's refusals of a unary request, in grpc-go's code and words (read off etcd 3.4.23).
    #[test]
    fn unary_refusals_get_grpc_gos_code_and_words() {
        let cases = [
            (
                Status::out_of_range("Error, decoded message length too large: found 5000 bytes, the limit is: 4096 bytes"),
                (Code::ResourceExhausted, "grpc: received message larger than max (5000 vs. 4096)"),
            ),
            (
                Status::internal("failed to decode Protobuf message: invalid wire type"),
                (Code::Internal, "grpc: error unmarshalling request: invalid wire type"),
            ),
            (Status::internal("Unexpected EOF decoding stream."), (Code::Unknown, "unexpected EOF")),
            (Status::internal("Missing request message."), (Code::Unknown, "EOF")),
            (
                Status::internal("protocol error: received message with invalid compression flag: 7 (valid flags are 0 and 1) while receiving request"),
                (Code::Internal, "grpc: received unexpected payload format 7"),
            ),
            (
                Status::internal("protocol error: received message with compressed-flag but no grpc-encoding was specified"),
                (Code::Internal, "grpc: compressed flag set with identity or empty encoding"),
            ),
            (Status::unimplemented(""), (Code::Unimplemented, "unknown method Nope for service etcdserverpb.KV")),
            (Status::not_found("kept"), (Code::NotFound, "kept")),
        ];
        for (tonics, expected) in cases {
            let ours = rewritten("/etcdserverpb.KV/Nope", tonics.clone());
            assert_eq!(seen(&ours), expected, "{tonics:?}");
        }
        assert_eq!(
            seen(&rewritten("/nope.Service/Call", Status::unimplemented(""))),
            (Code::Unimplemented, "unknown service nope.Service")
        );
        assert_eq!(
            seen(&rewritten("/no-slash", Status::unimplemented(""))),
            (Code::ResourceExhausted, r#"malformed method name: "/no-slash""#)
        );
    }

    /// A stream's bad message ends it with grpc-go's streaming words; a client gone is no error.
    #[test]
    fn a_failed_request_stream_ends_as_grpc_go_ends_it() {
        assert!(stream_receive_error(Status::cancelled("gone")).is_none());
        let bad =
            stream_receive_error(Status::internal("failed to decode Protobuf message: bad tag")).unwrap();
        assert_eq!(seen(&bad), (Code::Internal, "grpc: failed to unmarshal the received message bad tag"));
        let other = stream_receive_error(Status::unavailable("kept")).unwrap();
        assert_eq!(seen(&other), (Code::Unavailable, "kept"));
    }
}
