//! The Watch response as the server sends it: etcd's `WatchResponse`, byte for byte on the
//! wire, whose events travel already encoded ([`SharedEvent`]).
//!
//! Why: a put that 1000 watchers see reaches 1000 responses. With prost's `Event` each of them
//! holds its own copy of the event and tonic encodes it 1000 times (the key, the value, four
//! varints and two nested lengths, each time). Here the watch tree encodes the event once per
//! revision (once more for the watchers that want `prev_kv`) and every response points at the
//! same bytes; sending a response copies them into its stream's frame, nothing more.
//!
//! The server's Watch route ([`crate::codec::LeanCodec`] over this type) sends it, and any
//! client decodes the same bytes as `WatchResponse`; [`WatchReply::into_response`] does the
//! same in process, for the callers that read events (Lock, Election, the JSON gateway).
//!
//! ```text
//! WatchResponse  = header(1) watch_id(2) created(3) canceled(4) compact_revision(5)
//!                  cancel_reason(6) fragment(7) events(11)*
//! events(11)     = key 0x5a | varint length | SharedEvent's bytes (an encoded mvccpb.Event)
//! ```

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{
    self, encode_key, encode_varint, encoded_len_varint, key_len, DecodeContext, WireType,
};
use prost::{DecodeError, Message};
use smallvec::SmallVec;

use crate::etcdserverpb::{ResponseHeader, WatchResponse};
use crate::mvccpb::Event;

/// WatchResponse's field numbers (etcd's rpc.proto).
const HEADER: u32 = 1;
const WATCH_ID: u32 = 2;
const CREATED: u32 = 3;
const CANCELED: u32 = 4;
const COMPACT_REVISION: u32 = 5;
const CANCEL_REASON: u32 = 6;
const FRAGMENT: u32 = 7;
const EVENTS: u32 = 11;

/// A response's events. One inline: a watcher in step with the writes gets one event a
/// response, and 1000 such responses a put would otherwise be 1000 small allocations on the
/// shard's thread freed on the sender's (jemalloc's cross-thread flushes showed in profiles).
pub type Events = SmallVec<[SharedEvent; 1]>;

/// etcd's `WatchResponse` with its events encoded and shared; the fields are etcd's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchReply {
    pub header: Option<ResponseHeader>,
    pub watch_id: i64,
    pub created: bool,
    pub canceled: bool,
    pub compact_revision: i64,
    pub cancel_reason: String,
    pub fragment: bool,
    pub events: Events,
}

/// One `mvccpb.Event`, encoded; a clone shares the bytes.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SharedEvent(Bytes);

impl SharedEvent {
    /// Encodes `event` once, for every response that carries it.
    pub fn new(event: &Event) -> Self {
        Self(Bytes::from(event.encode_to_vec()))
    }

    /// The event's encoded size: what it adds to a response, less its field key and length.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty event (a PUT with no key-value: never sent by the server).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The event, decoded again: for in-process readers and tests, not the send path.
    pub fn decode(&self) -> Result<Event, DecodeError> {
        Event::decode(self.0.clone())
    }

    /// Whether both are one encoding, shared: what the watch tree promises every watcher of
    /// an event (its tests check), not merely equal bytes.
    pub fn shares_encoding_with(&self, other: &SharedEvent) -> bool {
        self.0.as_ptr() == other.0.as_ptr() && self.0.len() == other.0.len()
    }

    fn field_len(&self) -> usize {
        key_len(EVENTS) + encoded_len_varint(self.0.len() as u64) + self.0.len()
    }
}

impl std::fmt::Debug for SharedEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            Ok(event) => event.fmt(f),
            Err(e) => write!(f, "SharedEvent({} undecodable bytes: {e})", self.0.len()),
        }
    }
}

impl From<WatchResponse> for WatchReply {
    fn from(r: WatchResponse) -> Self {
        WatchReply {
            header: r.header,
            watch_id: r.watch_id,
            created: r.created,
            canceled: r.canceled,
            compact_revision: r.compact_revision,
            cancel_reason: r.cancel_reason,
            fragment: r.fragment,
            events: r.events.iter().map(SharedEvent::new).collect(),
        }
    }
}

impl WatchReply {
    /// The same response with its events decoded.
    pub fn into_response(self) -> Result<WatchResponse, DecodeError> {
        Ok(WatchResponse {
            events: self.events.iter().map(SharedEvent::decode).collect::<Result<_, _>>()?,
            header: self.header,
            watch_id: self.watch_id,
            created: self.created,
            canceled: self.canceled,
            compact_revision: self.compact_revision,
            cancel_reason: self.cancel_reason,
            fragment: self.fragment,
        })
    }
}

// prost's derive writes these four for generated types; this one writes the events' bytes as
// they are. Fields at their zero value are left out, as proto3 (and prost) leave them out, so
// the bytes equal `WatchResponse`'s (the tests compare them).
impl Message for WatchReply {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(header) = &self.header {
            encoding::message::encode(HEADER, header, buf);
        }
        if self.watch_id != 0 {
            encoding::int64::encode(WATCH_ID, &self.watch_id, buf);
        }
        if self.created {
            encoding::bool::encode(CREATED, &self.created, buf);
        }
        if self.canceled {
            encoding::bool::encode(CANCELED, &self.canceled, buf);
        }
        if self.compact_revision != 0 {
            encoding::int64::encode(COMPACT_REVISION, &self.compact_revision, buf);
        }
        if !self.cancel_reason.is_empty() {
            encoding::string::encode(CANCEL_REASON, &self.cancel_reason, buf);
        }
        if self.fragment {
            encoding::bool::encode(FRAGMENT, &self.fragment, buf);
        }
        for event in &self.events {
            encode_key(EVENTS, WireType::LengthDelimited, buf);
            encode_varint(event.0.len() as u64, buf);
            buf.put_slice(&event.0);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            HEADER => encoding::message::merge(
                wire_type,
                self.header.get_or_insert_with(Default::default),
                buf,
                ctx,
            ),
            WATCH_ID => encoding::int64::merge(wire_type, &mut self.watch_id, buf, ctx),
            CREATED => encoding::bool::merge(wire_type, &mut self.created, buf, ctx),
            CANCELED => encoding::bool::merge(wire_type, &mut self.canceled, buf, ctx),
            COMPACT_REVISION => encoding::int64::merge(wire_type, &mut self.compact_revision, buf, ctx),
            CANCEL_REASON => encoding::string::merge(wire_type, &mut self.cancel_reason, buf, ctx),
            FRAGMENT => encoding::bool::merge(wire_type, &mut self.fragment, buf, ctx),
            EVENTS => {
                let mut bytes = Bytes::new();
                encoding::bytes::merge(wire_type, &mut bytes, buf, ctx)?;
                let event = SharedEvent(bytes);
                // Checked here, so an event that came in is one `decode` can read.
                event.decode()?;
                self.events.push(event);
                Ok(())
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        self.header.as_ref().map_or(0, |h| encoding::message::encoded_len(HEADER, h))
            + if self.watch_id != 0 { encoding::int64::encoded_len(WATCH_ID, &self.watch_id) } else { 0 }
            + if self.created { encoding::bool::encoded_len(CREATED, &self.created) } else { 0 }
            + if self.canceled { encoding::bool::encoded_len(CANCELED, &self.canceled) } else { 0 }
            + if self.compact_revision != 0 {
                encoding::int64::encoded_len(COMPACT_REVISION, &self.compact_revision)
            } else {
                0
            }
            + if self.cancel_reason.is_empty() {
                0
            } else {
                encoding::string::encoded_len(CANCEL_REASON, &self.cancel_reason)
            }
            + if self.fragment { encoding::bool::encoded_len(FRAGMENT, &self.fragment) } else { 0 }
            + self.events.iter().map(SharedEvent::field_len).sum::<usize>()
    }

    fn clear(&mut self) {
        *self = WatchReply::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mvccpb::{event::EventType, KeyValue};

    fn kv(key: &str, value: &str, rev: i64) -> KeyValue {
        KeyValue {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: 2,
            mod_revision: rev,
            version: rev - 1,
            lease: if rev % 2 == 0 { 0x1234 } else { 0 },
        }
    }

    /// Responses with every field set or left at zero, events with and without prev_kv.
    fn samples() -> Vec<WatchResponse> {
        let put = Event { r#type: EventType::Put as i32, kv: Some(kv("a", "1", 5)), prev_kv: None };
        let with_prev = Event {
            r#type: EventType::Put as i32,
            kv: Some(kv("a", "2", 6)),
            prev_kv: Some(kv("a", "1", 5)),
        };
        let delete = Event { r#type: EventType::Delete as i32, kv: Some(kv("a", "", 7)), prev_kv: None };
        let big = Event { kv: Some(kv("k", &"v".repeat(300), 8)), ..put.clone() };
        vec![
            WatchResponse::default(),
            WatchResponse { watch_id: -1, header: Some(ResponseHeader::default()), ..Default::default() },
            WatchResponse {
                header: Some(ResponseHeader { cluster_id: 7, member_id: 9, revision: 8, raft_term: 3 }),
                watch_id: 42,
                created: true,
                canceled: true,
                compact_revision: 3,
                cancel_reason: "mvcc: required revision has been compacted".into(),
                fragment: true,
                events: vec![put.clone(), with_prev.clone(), delete.clone(), big.clone()],
            },
            WatchResponse {
                watch_id: i64::MAX,
                events: vec![big, put, delete, with_prev],
                ..Default::default()
            },
        ]
    }

    #[test]
    fn encodes_to_watch_responses_bytes_and_decodes_back() {
        for response in samples() {
            let reply = WatchReply::from(response.clone());
            let bytes = reply.encode_to_vec();
            assert_eq!(bytes, response.encode_to_vec(), "{response:?}");
            assert_eq!(reply.encoded_len(), bytes.len());
            assert_eq!(WatchReply::decode(bytes.as_slice()).expect("decodes"), reply);
            assert_eq!(WatchResponse::decode(bytes.as_slice()).expect("decodes"), response);
            assert_eq!(reply.into_response().expect("decodes"), response);
        }
    }

    #[test]
    fn a_shared_event_is_the_same_bytes_in_every_response() {
        let event = SharedEvent::new(&samples()[2].events[3]);
        let a = WatchReply { watch_id: 1, events: smallvec::smallvec![event.clone()], ..Default::default() };
        let b = WatchReply { watch_id: 2, events: smallvec::smallvec![event.clone()], ..Default::default() };
        assert!(a.events[0].shares_encoding_with(&b.events[0]));
        assert!(!event.shares_encoding_with(&SharedEvent::new(&samples()[2].events[3])), "equal, not shared");
    }

    #[test]
    fn an_event_that_is_not_an_event_is_refused_on_decode() {
        // Field 11, length 2, then bytes that are no Event (field 1 with wire type 7).
        let bad = [0x5a, 0x02, 0x0f, 0x00];
        assert!(WatchReply::decode(&bad[..]).is_err());
        assert!(WatchResponse::decode(&bad[..]).is_err());
    }
}
