//! The part of a Watch response the watch commands read, decoded as such: the watch id, whether
//! the watch was created or canceled (and why), and for each event the first bytes of its value
//! (the put's send time). Everything else on the wire (the header, each event's key, revisions
//! and previous key-value) is skipped by prost without being decoded.
//!
//! Why: the load client is one thread on the same machine as the server it measures. Decoding
//! the full `WatchResponse` was a quarter of its CPU at a million events a second (2026-12-06
//! profile), CPU that both servers then lacked; a client that does less leaves the comparison
//! to the servers. The field numbers are etcd's (`rpc.proto`, `kv.proto`); the tests below
//! decode a full response encoded by `actcd-proto` to hold them to it.

use actcd_proto::codec::LeanCodec;
use actcd_proto::etcdserverpb::WatchRequest;
use bytes::Bytes;
use futures::Stream;
use tonic::client::{Grpc, GrpcService};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::{Body, GrpcMethod, StdError};
use tonic::{Request, Status, Streaming};

/// A `WatchResponse` reduced to what the watch commands read (etcd's field numbers).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StampedResponse {
    #[prost(int64, tag = "2")]
    pub watch_id: i64,
    #[prost(bool, tag = "3")]
    pub created: bool,
    #[prost(bool, tag = "4")]
    pub canceled: bool,
    #[prost(string, tag = "6")]
    pub cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<StampedEvent>,
}

/// An `mvccpb.Event` reduced to its key-value's value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StampedEvent {
    #[prost(message, optional, tag = "2")]
    pub kv: Option<ValueOnly>,
}

/// An `mvccpb.KeyValue` reduced to its value (a stamped put's first 8 bytes are its send time).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueOnly {
    #[prost(bytes = "bytes", tag = "5")]
    pub value: Bytes,
}

impl StampedEvent {
    pub fn stamp(&self) -> Option<[u8; 8]> {
        self.kv.as_ref().and_then(|kv| kv.value.get(..8)).and_then(|b| <[u8; 8]>::try_from(b).ok())
    }
}

/// Calls `etcdserverpb.Watch/Watch` on `conn` as the generated client does, with responses
/// decoded as [`StampedResponse`].
pub async fn watch<T>(
    conn: T,
    max_decoding: usize,
    requests: impl Stream<Item = WatchRequest> + Send + 'static,
) -> Result<Streaming<StampedResponse>, Status>
where
    T: GrpcService<tonic::body::Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as Body>::Error: Into<StdError> + Send,
{
    let mut grpc = Grpc::new(conn).max_decoding_message_size(max_decoding);
    grpc.ready().await.map_err(|e| Status::unknown(format!("Service was not ready: {}", e.into())))?;
    let mut request = Request::new(requests);
    request.extensions_mut().insert(GrpcMethod::new("etcdserverpb.Watch", "Watch"));
    let path = PathAndQuery::from_static("/etcdserverpb.Watch/Watch");
    let codec = LeanCodec::<WatchRequest, StampedResponse>::default();
    Ok(grpc.streaming(request, path, codec).await?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actcd_proto::etcdserverpb::{ResponseHeader, WatchResponse};
    use actcd_proto::mvccpb::{Event, KeyValue};
    use prost::Message;

    fn kv(key: &str, value: &[u8]) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            create_revision: 2,
            mod_revision: 9,
            version: 3,
            value: Bytes::copy_from_slice(value),
            lease: 7,
        }
    }

    #[test]
    fn a_full_response_decodes_to_what_the_commands_read() {
        let stamp = 123_456_789u64.to_le_bytes();
        let mut value = stamp.to_vec();
        value.extend_from_slice(b"rest of the value");
        let full = WatchResponse {
            header: Some(ResponseHeader { cluster_id: 1, member_id: 2, revision: 9, raft_term: 3 }),
            watch_id: 42,
            created: true,
            canceled: true,
            compact_revision: 5,
            cancel_reason: "mvcc: required revision has been compacted".to_string(),
            fragment: true,
            events: vec![
                Event { r#type: 0, kv: Some(kv("k", &value)), prev_kv: Some(kv("k", b"old value")) },
                Event { r#type: 1, kv: Some(kv("gone", b"")), prev_kv: None },
            ],
        };
        let lean = StampedResponse::decode(full.encode_to_vec().as_slice()).expect("decodes");
        assert!(lean.created && lean.canceled && lean.watch_id == 42);
        assert_eq!(lean.cancel_reason, full.cancel_reason);
        assert_eq!(lean.events.len(), 2);
        assert_eq!(lean.events[0].stamp(), Some(stamp));
        // A delete's key-value has no value: no stamp (the event is timed on arrival).
        assert_eq!(lean.events[1].stamp(), None);
        // Nor has an event without a key-value.
        let full = WatchResponse { events: vec![Event::default()], ..Default::default() };
        let lean = StampedResponse::decode(full.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(lean.events, vec![StampedEvent { kv: None }]);
        assert!(!lean.created && !lean.canceled && lean.cancel_reason.is_empty());
    }
}
