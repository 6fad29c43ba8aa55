//! The on-disk decoders on arbitrary bytes: revision keys, history values (kind byte plus a
//! protobuf KeyValue) and meta integers. None may panic, and whatever decodes must encode back
//! to something that decodes to the same thing (a revision key to the very same bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;

use actcd_store::backend::codec::{
    decode_history, decode_history_value, decode_i64, encode_history_value, encode_i64,
};
use actcd_store::mvcc::revision::Revision;

fuzz_target!(|data: &[u8]| {
    if let Ok(rev) = Revision::from_key_bytes(data) {
        assert_eq!(
            rev.try_to_key_bytes().as_ref().map(|k| &k[..]),
            Ok(data),
            "revision key did not round-trip"
        );
        assert!(rev.main <= Revision::MAX_MAIN && rev.sub <= Revision::MAX_SUB);
    }
    if data.len() >= 8 {
        let packed = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
        let (rev, tombstone) = Revision::unpack(packed);
        if let Ok(again) = rev.pack(tombstone) {
            assert_eq!(again, packed, "unpack then pack changed the value");
        }
    }
    if let Ok((tombstone, kv)) = decode_history_value(data) {
        let encoded = encode_history_value(tombstone, &kv);
        assert_eq!(decode_history_value(&encoded), Ok((tombstone, kv)), "history value did not round-trip");
    }
    if let Ok(v) = decode_i64(data) {
        assert_eq!(encode_i64(v), data, "meta integer did not round-trip");
    }
    if data.len() >= 8 {
        let (key, value) = data.split_at(8);
        let _ = decode_history(key, value);
    }
});
