//! How message bytes travel inside JSON (docs/design.md §2).
//!
//! In (batch produce): a payload without `payload_encoding` is stored as the JSON text of its
//! value exactly as the request wrote it: a string keeps its quotes and escapes, an object its
//! inner whitespace and number spellings. With `"payload_encoding": "base64"` it is a JSON string
//! whose base64 decoding is stored. Keys are strings (their UTF-8 bytes), or base64 with
//! `"key_encoding": "base64"`.
//!
//! Out (consume): a payload that is exactly one JSON value, in valid UTF-8 with no whitespace
//! around it, is embedded as that JSON text, so what a batch sent comes back byte for byte; a
//! JSON string so embedded carries `"payload_encoding": "json"`, because without it a reader
//! could not tell it from text. Other valid UTF-8 becomes a JSON string; anything else is base64
//! with `"payload_encoding": "base64"`. A reader gets the bytes back exactly: base64-decode; take
//! the value's text as it stands for `"json"` or for any value that is not a string; take a
//! string's contents otherwise. The message carries `timestamp` in Unix seconds (the v1 shape)
//! and `timestamp_ms` beside it.

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
    out.extend_from_slice(b",\"partition\":");
    write_number(out, u64::from(record.partition));
    out.extend_from_slice(b",\"offset\":");
    write_number(out, record.offset);
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
    let ms = record.timestamp_ms;
    out.extend_from_slice(b",\"timestamp\":");
    write_number(out, ms / 1000);
    out.extend_from_slice(b",\"timestamp_ms\":");
    write_number(out, ms);
    out.push(b'}');
}

/// Appends `n` in decimal (`itoa`: formatting through `write!` was about 7 % of a replay's server CPU).
fn write_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends the payload as JSON, then (for a JSON string or binary) the `payload_encoding` member.
fn write_payload(out: &mut Vec<u8>, payload: &[u8]) {
    match std::str::from_utf8(payload) {
        Ok(text) if embeds_as_json(text) => {
            out.extend_from_slice(payload);
            if text.starts_with('"') {
                out.extend_from_slice(b",\"payload_encoding\":\"json\"");
            }
        }
        Ok(text) => write_str(out, text),
        Err(_) => {
            write_base64(out, payload);
            out.extend_from_slice(b",\"payload_encoding\":\"base64\"");
        }
    }
}

/// True if `text` can be embedded as it stands and read back byte for byte: exactly one JSON
/// value with no whitespace around it (a reader's parser would drop it). The caller has checked
/// UTF-8: serde_json's byte parser skips string contents without checking them, so `"\x90"`
/// passed as bytes. A lone surrogate escape (`"\ud800"`) is JSON's grammar but no strict
/// parser's string (serde_json refuses the whole message), so text holding a surrogate escape
/// must parse strictly; the cheap check covers everything else.
fn embeds_as_json(text: &str) -> bool {
    let padded = text.starts_with(JSON_WHITESPACE) || text.ends_with(JSON_WHITESPACE);
    if padded {
        return false;
    }
    if has_surrogate_escape(text) {
        return serde_json::from_str::<serde_json::Value>(text).is_ok();
    }
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

/// True if `text` holds `\uD800` to `\uDFFF` (either case): a surrogate escape, paired or not.
/// A false positive (an escaped backslash before `ud8..`) only costs the strict parse.
/// Finds each backslash with `memchr` (most payloads have none): this runs on every record a
/// consume answers, and a byte-by-byte scan cost a quarter of a replay's server CPU.
fn has_surrogate_escape(text: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memchr_iter(b'\\', bytes).any(|at| {
        matches!(
            bytes.get(at + 1..at + 4),
            Some([b'u', b'd' | b'D', b'8' | b'9' | b'a'..=b'f' | b'A'..=b'F'])
        )
    })
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

/// Decodes a payload from a batch produce message: the value's JSON text as written, or with
/// `"base64"` the decoding of a string.
pub fn payload_from_json(raw: &RawValue, encoding: Option<&str>) -> Result<Bytes, String> {
    let text = raw.get();
    let is_string = text.starts_with('"');
    match encoding {
        None => Ok(Bytes::copy_from_slice(text.as_bytes())),
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

    /// Issue 12: `timestamp` is Unix seconds, as the original v1 API sends it, with the
    /// milliseconds beside it.
    #[test]
    fn json_text_and_binary_payloads() {
        let json = record(Some(b"k"), br#"{"a": [1, 2.50]}"#);
        assert_eq!(
            json,
            r#"{"topic":"t\"1","partition":2,"offset":7,"key":"k","payload":{"a": [1, 2.50]},"timestamp":1700000000,"timestamp_ms":1700000000123}"#
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

    /// Issue 12: a payload that is a JSON string (what a batch's `"payload":"123"` stores) is
    /// embedded as that string, marked, not turned into the number `123` or quoted again.
    #[test]
    fn a_json_string_payload_is_embedded_and_marked() {
        let out = record(None, br#""123""#);
        assert!(out.contains(r#""payload":"123","payload_encoding":"json","timestamp""#), "{out}");
        let out = record(None, br#""h\u00e9 \"x\"""#);
        assert!(out.contains(r#""payload":"h\u00e9 \"x\"","payload_encoding":"json""#), "{out}");
        // A lone surrogate escape is JSON's grammar but no strict parser's string: text.
        let out = record(None, br#""\ud800""#);
        assert!(out.contains(r#""payload":"\"\\ud800\"","timestamp""#), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
    }

    /// Inside an object too: serde_json's lenient check passed `{"a":"\ud800"}`, and the whole
    /// consume answer then failed every strict parser. A pair is a character and stays JSON.
    #[test]
    fn a_lone_surrogate_escape_is_never_embedded() {
        let out = record(None, br#"{"a":"\uDBFF"}"#);
        assert!(out.contains(r#""payload":"{\"a\":\"\\uDBFF\"}","timestamp""#), "{out}");
        serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
        let out = record(None, br#"["\ud83d\ude00"]"#);
        assert!(out.contains(r#""payload":["\ud83d\ude00"],"timestamp""#), "{out}");
        assert!(has_surrogate_escape(r"x\uDc00") && !has_surrogate_escape(r"\u00e9 \ud7ff"));
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).expect("valid JSON")
    }

    /// Issue 12: a batch payload is stored as its JSON text exactly as sent, quotes and
    /// whitespace included.
    #[test]
    fn batch_payloads_decode() {
        let p = |text: &str, enc: Option<&str>| payload_from_json(&raw(text), enc);
        assert_eq!(p(r#""h\u00e9""#, None), Ok(Bytes::from(r#""h\u00e9""#)));
        assert_eq!(p(r#""123""#, None), Ok(Bytes::from(r#""123""#)));
        assert_eq!(
            p(r#"{ "a" : [1, 1e3, "x y"] }"#, None),
            Ok(Bytes::from(r#"{ "a" : [1, 1e3, "x y"] }"#))
        );
        assert_eq!(p("12.50", None), Ok(Bytes::from("12.50")));
        assert_eq!(p("null", None), Ok(Bytes::from("null")));
        assert_eq!(p(r#""AJ+Slg""#, Some("base64")), Ok(Bytes::from(vec![0, 159, 146, 150])));
        assert!(p(r#""not base64!""#, Some("base64")).is_err());
        assert!(p("1", Some("base64")).is_err());
        assert!(p(r#""x""#, Some("hex")).is_err());
        assert!(p(r#""x""#, Some("json")).is_err(), "only base64 is an input encoding");
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

    /// What a reader does: base64; the value's text as it stands for `json` or a non-string;
    /// a string's contents otherwise.
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
            (Some("json"), _) | (None, false) => raw.as_bytes().to_vec(),
            (None, true) => json_string(message.payload).unwrap().into_bytes(),
            (Some(other), _) => panic!("unknown encoding {other}"),
        }
    }

    #[test]
    fn every_payload_reads_back_byte_for_byte() {
        let payloads: [&[u8]; 13] = [
            b"\"quoted\"",
            b"\"123\"",
            b" {\"a\": 1}",
            b"[1, 2]\n",
            b"{ \"a\" : [1, 2.50] }",
            b"12.50",
            b"null",
            b"plain text",
            b"\"\x90\"",
            &[0, 159, 146, 150],
            b"\"unterminated",
            b"\"\\ud800\"",
            b"{\"a\":\"\\ud800\"}",
        ];
        for payload in payloads {
            assert_eq!(read_back(&record(None, payload)), payload, "{payload:?}");
        }
    }

    /// What a batch sends comes back as the same JSON text: produce, then consume.
    #[test]
    fn batch_values_come_back_as_sent() {
        for sent in [r#""123""#, r#"{"id": "o2",  "amount": 7}"#, "[1,  2]", "1e3", r#""a\nb""#] {
            let stored = payload_from_json(&raw(sent), None).expect("valid payload");
            let out = record(None, &stored);
            let message: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&out).expect("valid JSON");
            let start = out.find(r#""payload":"#).expect("payload member") + 10;
            assert!(out[start..].starts_with(sent), "{sent} came back in {out}");
            assert!(message.contains_key("payload"));
        }
    }
}
