//! How message bytes travel inside JSON (docs/design.md §2).
//!
//! Out (consume): a payload that is a JSON object, array, number, `true`, `false` or `null`, in
//! valid UTF-8 with no whitespace around it, is embedded as that JSON text; other valid UTF-8
//! (a JSON string included) becomes a JSON string; anything else is base64 with
//! `"payload_encoding": "base64"`. So a reader gets the bytes back exactly: base64-decode, or take
//! a string's contents, or take any other value's text as it stands. Keys are strings,
//! or base64 with `"key_encoding": "base64"`. In (batch produce): a JSON string is its UTF-8 bytes
//! (or base64-decoded bytes with `"payload_encoding": "base64"`); any other JSON value is its
//! compact serialisation, taken from the request text itself so numbers keep their spelling.

use std::io::Write;

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use bytes::Bytes;
use narad_core::ConsumedRecord;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// Accepts base64 with or without padding.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Appends one message object for `record` to `out`.
pub fn write_record(out: &mut Vec<u8>, record: &ConsumedRecord) {
    out.extend_from_slice(b"{\"topic\":");
    write_str(out, &record.topic);
    write!(out, ",\"partition\":{},\"offset\":{}", record.partition, record.offset)
        .expect("invariant: writing to a Vec cannot fail");
    if let Some(key) = &record.key {
        out.extend_from_slice(b",\"key\":");
        if let Ok(text) = std::str::from_utf8(key) {
            write_str(out, text);
        } else {
            write_base64(out, key);
            out.extend_from_slice(b",\"key_encoding\":\"base64\"");
        }
    }
    out.extend_from_slice(b",\"payload\":");
    write_payload(out, &record.payload);
    write!(out, ",\"timestamp\":{}}}", record.timestamp_ms)
        .expect("invariant: writing to a Vec cannot fail");
}

/// Appends the payload as JSON, then (for binary) the `payload_encoding` member.
fn write_payload(out: &mut Vec<u8>, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(text) if embeds_as_json(text) => out.extend_from_slice(payload),
        Ok(text) => write_str(out, text),
        Err(_) => {
            write_base64(out, payload);
            out.extend_from_slice(b",\"payload_encoding\":\"base64\"");
        }
    }
}

/// True if `text` can be embedded as it stands and read back byte for byte: exactly one JSON
/// value, not a string (a reader would take the text inside its quotes), with no whitespace
/// around it (a reader's parser would drop it). The caller has checked UTF-8: serde_json's byte
/// parser skips string contents without checking them, so `"\x90"` passed as bytes.
fn embeds_as_json(text: &str) -> bool {
    let padded = text.starts_with(JSON_WHITESPACE) || text.ends_with(JSON_WHITESPACE);
    !padded && !text.starts_with('"') && serde_json::from_str::<IgnoredAny>(text).is_ok()
}

const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

fn write_str(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(&mut *out, text).expect("invariant: writing to a Vec cannot fail");
}

fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    out.resize(start + base64::encoded_len(bytes.len(), true).unwrap_or(0), 0);
    let written = STANDARD
        .encode_slice(bytes, &mut out[start..])
        .expect("invariant: the buffer was sized by encoded_len");
    out.truncate(start + written);
    out.push(b'"');
}

/// Decodes a payload from a batch produce message.
pub fn payload_from_json(raw: &RawValue, encoding: Option<&str>) -> Result<Bytes, String> {
    let text = raw.get();
    let is_string = text.starts_with('"');
    match encoding {
        None if is_string => Ok(Bytes::from(json_string(raw)?.into_bytes())),
        None => Ok(Bytes::from(minify(text))),
        Some("base64") if is_string => decode_base64(&json_string(raw)?, "payload"),
        Some("base64") => Err("payload_encoding \"base64\" needs a string payload".to_string()),
        Some(other) => Err(format!("unknown payload_encoding {other:?} (only \"base64\")")),
    }
}

/// Decodes a key from a batch produce message; an empty key means no key.
pub fn key_from_json(key: &str, encoding: Option<&str>) -> Result<Option<Bytes>, String> {
    let bytes = match encoding {
        None => Bytes::copy_from_slice(key.as_bytes()),
        Some("base64") => decode_base64(key, "key")?,
        Some(other) => return Err(format!("unknown key_encoding {other:?} (only \"base64\")")),
    };
    Ok((!bytes.is_empty()).then_some(bytes))
}

fn json_string(raw: &RawValue) -> Result<String, String> {
    serde_json::from_str(raw.get()).map_err(|e| format!("payload: {e}"))
}

fn decode_base64(text: &str, what: &str) -> Result<Bytes, String> {
    LENIENT_BASE64
        .decode(text)
        .map(Bytes::from)
        .map_err(|e| format!("{what} is not valid base64: {e}"))
}

/// Removes insignificant whitespace from valid JSON text (the input is already validated).
fn minify(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            in_string = b == b'"';
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: Option<&[u8]>, payload: &[u8]) -> String {
        let record = ConsumedRecord {
            topic: "t\"1".to_string(),
            partition: 2,
            offset: 7,
            key: key.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(payload),
            timestamp_ms: 1_700_000_000_123,
        };
        let mut out = Vec::new();
        write_record(&mut out, &record);
        String::from_utf8(out).expect("JSON output is UTF-8")
    }

    #[test]
    fn json_text_and_binary_payloads() {
        let json = record(Some(b"k"), br#"{"a": [1, 2.50]}"#);
        assert_eq!(
            json,
            r#"{"topic":"t\"1","partition":2,"offset":7,"key":"k","payload":{"a": [1, 2.50]},"timestamp":1700000000123}"#
        );
        let text = record(None, b"hello \"world\"");
        assert!(text.contains(r#""payload":"hello \"world\"","timestamp""#), "{text}");
        let binary = record(Some(&[0xff, 0xfe]), &[0, 159, 146, 150]);
        assert!(binary.contains(r#""key":"//4=","key_encoding":"base64""#), "{binary}");
        assert!(binary.contains(r#""payload":"AJ+Slg==","payload_encoding":"base64""#));
        for out in [json, text, binary] {
            serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
        }
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).expect("valid JSON")
    }

    #[test]
    fn batch_payloads_decode() {
        let p = |text: &str, enc: Option<&str>| payload_from_json(&raw(text), enc);
        assert_eq!(p(r#""h\u00e9""#, None), Ok(Bytes::from("hé")));
        assert_eq!(
            p(r#"{ "a" : [1, 1e3, "x y"] }"#, None),
            Ok(Bytes::from(r#"{"a":[1,1e3,"x y"]}"#))
        );
        assert_eq!(p("12.50", None), Ok(Bytes::from("12.50")));
        assert_eq!(p(r#""AJ+Slg""#, Some("base64")), Ok(Bytes::from(vec![0, 159, 146, 150])));
        assert!(p(r#""not base64!""#, Some("base64")).is_err());
        assert!(p("1", Some("base64")).is_err());
        assert!(p(r#""x""#, Some("hex")).is_err());
        assert_eq!(key_from_json("", None), Ok(None));
        assert_eq!(key_from_json("//4=", Some("base64")), Ok(Some(Bytes::from(vec![255, 254]))));
    }

    /// Issue 9, defect 1: the 3 bytes `"` 0x90 `"` passed serde_json's byte-slice check and were
    /// embedded raw, so the consume answer was not valid UTF-8 (nor JSON).
    #[test]
    fn invalid_utf8_inside_quotes_comes_back_as_base64() {
        let out = record(None, b"\"\x90\"");
        assert!(out.contains(r#""payload":"IpAi","payload_encoding":"base64""#), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
    }

    /// What a reader does: base64, a string's contents, or any other value's text as it stands.
    fn read_back(out: &str) -> Vec<u8> {
        #[derive(serde::Deserialize)]
        struct Message<'a> {
            #[serde(borrow)]
            payload: &'a RawValue,
            payload_encoding: Option<String>,
        }
        let message: Message<'_> = serde_json::from_str(out).expect("valid JSON");
        let raw = message.payload.get();
        match (message.payload_encoding.as_deref(), raw.starts_with('"')) {
            (Some("base64"), _) => {
                LENIENT_BASE64.decode(json_string(message.payload).unwrap()).unwrap()
            }
            (None, true) => json_string(message.payload).unwrap().into_bytes(),
            (None, false) => raw.as_bytes().to_vec(),
            (Some(other), _) => panic!("unknown encoding {other}"),
        }
    }

    #[test]
    fn every_payload_reads_back_byte_for_byte() {
        let payloads: [&[u8]; 10] = [
            b"\"quoted\"",
            b" {\"a\": 1}",
            b"[1, 2]\n",
            b"{ \"a\" : [1, 2.50] }",
            b"12.50",
            b"null",
            b"plain text",
            b"\"\x90\"",
            &[0, 159, 146, 150],
            b"\"unterminated",
        ];
        for payload in payloads {
            assert_eq!(read_back(&record(None, payload)), payload, "{payload:?}");
        }
    }

    #[test]
    fn minify_keeps_strings_intact() {
        assert_eq!(minify("[ \"a \\\" b\" ,\n\t{} ]"), b"[\"a \\\" b\",{}]");
    }
}
