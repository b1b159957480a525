//! Fuzzes the batch produce body decoder (`runtime-tokio/src/http/produce.rs` `decode_batch`,
//! with `payload_json`'s `payload_from_json`/`key_from_json`): an accepted body holds 1 to 1,000
//! messages whose bytes agree with an independent reading of the JSON (a payload without an
//! encoding is JSON text, found as it stands in the body, equal to that value, a string included;
//! with `"payload_encoding":"base64"` a string's base64 decoding), and accepted messages written
//! back as a batch decode identically.
#![no_main]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use narad::fuzzing::decode_batch;
use narad_core::ProduceMessage;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(messages) = decode_batch(data) else { return };
    assert!((1..=1000).contains(&messages.len()));
    // serde_json's `Value` refuses numbers beyond f64 (`1e999`), which JSON's grammar and the
    // batch decoder allow: such bodies are only checked by the round trip below.
    if let Ok(body) = serde_json::from_slice::<Value>(data) {
        let given = body["messages"].as_array().expect("accepted bodies hold a messages array");
        assert_eq!(given.len(), messages.len());
        for (message, json) in messages.iter().zip(given) {
            agrees_with_json(message, json);
            if json.get("payload_encoding").is_none() {
                let text = &message.payload[..];
                assert!(data.windows(text.len()).any(|w| w == text), "payload text as sent");
            }
        }
    }
    let again = decode_batch(&batch_body(&messages)).expect("a re-encoded batch is accepted");
    assert_eq!(again, messages, "round trip");
});

/// Lenient base64 as the batch API accepts it (docs/design.md §2): padding optional.
fn base64_decode(text: &str) -> Vec<u8> {
    let trimmed = text.trim_end_matches('=');
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
    );
    engine.decode(trimmed).expect("accepted base64 decodes")
}

fn agrees_with_json(message: &ProduceMessage, json: &Value) {
    let payload = &json["payload"];
    match (payload, json["payload_encoding"].as_str()) {
        (Value::String(text), Some("base64")) => {
            assert_eq!(message.payload[..], base64_decode(text)[..]);
        }
        (other, None) => {
            let reread: Value = serde_json::from_slice(&message.payload).expect("payload is JSON");
            assert_eq!(&reread, other);
        }
        (_, encoding) => panic!("accepted payload_encoding {encoding:?} for {payload}"),
    }
    let key = match (json["key"].as_str(), json["key_encoding"].as_str()) {
        (None, _) => None,
        (Some(text), None) => Some(text.as_bytes().to_vec()),
        (Some(text), Some(_)) => Some(base64_decode(text)),
    };
    let key = key.filter(|k| !k.is_empty());
    assert_eq!(message.key.as_deref(), key.as_deref());
    assert_eq!(message.partition.map(u64::from), json["partition"].as_u64());
}

/// The messages as a batch body, payloads and keys in base64.
fn batch_body(messages: &[ProduceMessage]) -> Vec<u8> {
    let entries: Vec<Value> = messages
        .iter()
        .map(|m| {
            let mut entry = serde_json::json!({
                "payload": STANDARD.encode(&m.payload),
                "payload_encoding": "base64",
            });
            if let Some(key) = &m.key {
                entry["key"] = Value::from(STANDARD.encode(key));
                entry["key_encoding"] = Value::from("base64");
            }
            if let Some(partition) = m.partition {
                entry["partition"] = Value::from(partition);
            }
            entry
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({ "messages": entries })).expect("JSON encodes")
}
