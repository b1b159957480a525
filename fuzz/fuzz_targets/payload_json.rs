//! Fuzzes how consumed records become JSON (`runtime-tokio/src/payload_json.rs` `write_record`):
//! the output is always valid UTF-8 JSON, and its payload and key decode back to exactly the
//! record's bytes: the base64 decoding when `payload_encoding` is `"base64"`, the JSON value's own
//! text when it is `"json"` or the value is not a string, else the contents of the JSON string.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use narad::fuzzing::write_record;
use narad_core::ConsumedRecord;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The members of a message object a consumer decodes bytes from.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
    payload_encoding: Option<String>,
    key: Option<String>,
    key_encoding: Option<String>,
}

fuzz_target!(|data: &[u8]| {
    // The raw input is the payload (what `POST .../produce` stores byte for byte).
    check(&record(None, data));
    let mut u = Unstructured::new(data);
    if let (Ok(key), Ok(topic)) = (Option::<Vec<u8>>::arbitrary(&mut u), String::arbitrary(&mut u))
    {
        let mut r = record(key.as_deref(), u.take_rest());
        r.topic = topic;
        check(&r);
    }
});

fn record(key: Option<&[u8]>, payload: &[u8]) -> ConsumedRecord {
    ConsumedRecord {
        topic: "t".to_string(),
        partition: 1,
        offset: 2,
        key: key.map(Bytes::copy_from_slice),
        payload: Bytes::copy_from_slice(payload),
        timestamp_ms: 3,
    }
}

fn check(record: &ConsumedRecord) {
    let mut out = Vec::new();
    write_record(&mut out, record);
    let text = std::str::from_utf8(&out).unwrap_or_else(|e| panic!("output is not UTF-8: {e}"));
    let message: Message<'_> =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("output is not JSON: {e}: {text}"));
    assert!(payload_matches(&message, &record.payload), "payload changed: {text}");
    let key = match (&message.key, message.key_encoding.as_deref()) {
        (None, _) => None,
        (Some(k), Some("base64")) => Some(STANDARD.decode(k).expect("key base64")),
        (Some(k), _) => Some(k.as_bytes().to_vec()),
    };
    assert_eq!(key.as_deref(), record.key.as_deref(), "key changed: {text}");
}

/// Whether the payload member stands for exactly `bytes`, read by the one rule of
/// docs/design.md §2.
fn payload_matches(message: &Message<'_>, bytes: &[u8]) -> bool {
    let raw = message.payload.get();
    let is_string = raw.starts_with('"');
    match message.payload_encoding.as_deref() {
        Some("base64") => {
            let text: String = serde_json::from_str(raw).expect("a base64 payload is a string");
            STANDARD.decode(text).expect("payload base64") == bytes
        }
        Some("json") => is_string && raw.as_bytes() == bytes,
        Some(other) => panic!("unknown payload_encoding {other}"),
        None if is_string => {
            let text: String = serde_json::from_str(raw).expect("a JSON string");
            text.as_bytes() == bytes
        }
        None => raw.as_bytes() == bytes,
    }
}
