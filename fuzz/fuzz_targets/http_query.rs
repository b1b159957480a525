//! Fuzzes the produce and consume query-string parsers (`runtime-tokio/src/http/query.rs`)
//! against a small model of docs/design.md §2 written here (pairs split at `&`, `+` is a space,
//! `%XX` a byte, unknown names ignored, a known name twice is an error), and checks that parameters
//! written back as a query string parse to the same parameters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use narad::fuzzing::{ConsumeParams, ProduceParams, consume_params, duration_ms, produce_params};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else { return };
    let pairs = model_pairs(query);
    let produce = produce_params(Some(query));
    assert_eq!(produce.as_ref().ok(), model_produce(&pairs).as_ref(), "produce {query:?}");
    let consume = consume_params(Some(query));
    assert_eq!(consume.as_ref().ok(), model_consume(&pairs).as_ref(), "consume {query:?}");
    if let Ok(params) = produce {
        assert_eq!(produce_params(Some(&produce_query(&params))).ok(), Some(params));
    }
    if let Ok(params) = consume {
        assert_eq!(consume_params(Some(&consume_query(&params))).ok(), Some(params));
    }
});

/// The model's `name=value` pairs, decoded.
fn model_pairs(query: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, value) = p.split_once('=').unwrap_or((p, ""));
            (unescape(name), unescape(value))
        })
        .collect()
}

fn unescape(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) if hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (other, _) => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

/// Every value given for `name`.
fn values<'a>(pairs: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Vec<&'a [u8]> {
    pairs.iter().filter(|(n, _)| n == name.as_bytes()).map(|(_, v)| v.as_slice()).collect()
}

/// The single value of `name` parsed as a number; `Err` if given twice or not a number.
fn number<T: std::str::FromStr>(pairs: &[(Vec<u8>, Vec<u8>)], name: &str) -> Result<Option<T>, ()> {
    match values(pairs, name).as_slice() {
        [] => Ok(None),
        [one] => std::str::from_utf8(one).ok().and_then(|s| s.parse().ok()).map(Some).ok_or(()),
        _ => Err(()),
    }
}

fn model_produce(pairs: &[(Vec<u8>, Vec<u8>)]) -> Option<ProduceParams> {
    let key = match values(pairs, "key").as_slice() {
        [] => None,
        [one] => (!one.is_empty()).then(|| bytes::Bytes::copy_from_slice(one)),
        _ => return None,
    };
    Some(ProduceParams { key, partition: number(pairs, "partition").ok()? })
}

fn model_consume(pairs: &[(Vec<u8>, Vec<u8>)]) -> Option<ConsumeParams> {
    let partition = number(pairs, "partition").ok()?;
    let offset = number(pairs, "offset").ok()?;
    let max = number(pairs, "max").ok()?;
    let wait_ms = match values(pairs, "wait").as_slice() {
        [] => None,
        [one] => Some(model_wait(one)?),
        _ => return None,
    };
    let valid = max != Some(0) && (offset.is_none() || partition.is_some());
    valid.then_some(ConsumeParams { partition, offset, max, wait_ms })
}

/// `wait`: the plain spellings (`0`, nothing, `<n>ms`, `<n>s`) modelled here; any other Go
/// duration is left to the parser (checked by its unit tests and the round trip below).
fn model_wait(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    // Few enough digits that the nanoseconds fit Go's range.
    let digits = |d: &str, most: usize| {
        !d.is_empty() && d.len() <= most && d.bytes().all(|c| c.is_ascii_digit())
    };
    if text.is_empty() || text == "0" {
        return Some(0);
    }
    if let Some(ms) = text.strip_suffix("ms").filter(|d| digits(d, 12)) {
        return ms.parse().ok();
    }
    if let Some(s) = text.strip_suffix('s').filter(|d| digits(d, 9)) {
        return s.parse::<u64>().ok().map(|s| s * 1_000);
    }
    if text.bytes().all(|c| c.is_ascii_digit()) {
        return None; // a bare number: no unit
    }
    duration_ms(value).ok()
}

fn escape(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn produce_query(params: &ProduceParams) -> String {
    let mut parts = vec!["other=1".to_string()];
    if let Some(key) = &params.key {
        parts.push(format!("key={}", escape(key)));
    }
    if let Some(partition) = params.partition {
        parts.push(format!("partition={partition}"));
    }
    parts.join("&")
}

fn consume_query(params: &ConsumeParams) -> String {
    let mut parts = vec!["other=1".to_string()];
    if let Some(offset) = params.offset {
        parts.push(format!("offset={offset}"));
    }
    if let Some(partition) = params.partition {
        parts.push(format!("partition={partition}"));
    }
    if let Some(max) = params.max {
        parts.push(format!("max={max}"));
    }
    if let Some(wait) = params.wait_ms {
        parts.push(format!("wait={wait}ms"));
    }
    parts.join("&")
}
