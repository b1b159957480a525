//! Query-string parsing for produce, consume, ack and the topic reads. We parse by hand instead of
//! through serde so that a parameter given twice is an error (serde would keep one silently), keys
//! may be any bytes (percent-encoded), unknown parameters are ignored (docs/design.md §2), and the
//! common case allocates nothing.

use std::borrow::Cow;

use bytes::Bytes;
use narad_core::constants::{TOPIC_PAGE_DEFAULT, TOPIC_PAGE_MAX};
use percent_encoding::percent_decode;

use super::ApiError;

/// Parameters of `POST /v1/topics/{t}/produce`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProduceParams {
    /// Partition-affinity key; `key=` (empty) means no key.
    pub key: Option<Bytes>,
    /// Explicit partition.
    pub partition: Option<u32>,
}

/// Parameters of `GET /v1/topics/{t}/consume`.
#[derive(Debug, PartialEq, Eq)]
pub struct ConsumeParams {
    /// Required with `offset` (a replay); optional for a queue receive.
    pub partition: Option<u32>,
    /// First offset to replay; `None` makes the consume a queue receive (a lease).
    pub offset: Option<u64>,
    /// `Some` selects the list form of the answer.
    pub max: Option<u32>,
    /// `wait` (long-poll) in milliseconds as asked, before any clamp; `None`: not given.
    pub wait_ms: Option<u64>,
}

/// Parameters of `POST /v1/topics/{t}/ack`.
#[derive(Debug, PartialEq, Eq)]
pub struct SettleParams {
    /// The one handle to settle; `None`: the handles are in the body.
    pub receipt_handle: Option<String>,
    pub action: narad_core::api::SettleAction,
}

/// Parameters of `GET /v1/topics`.
#[derive(Debug, PartialEq, Eq)]
pub struct TopicListParams {
    /// Topics the page covers: `TOPIC_PAGE_DEFAULT` unless given; larger than
    /// `TOPIC_PAGE_MAX` is taken as it (as the original Narad does).
    pub limit: u32,
    /// The `next_page_token` of the page before: this page starts after that name.
    pub page_token: Option<String>,
}

/// Parses the topic list query string: `limit` (a positive integer) and `page_token`.
pub fn topic_list_params(query: Option<&str>) -> Result<TopicListParams, ApiError> {
    let (mut limit, mut page_token) = (None, None);
    for (name, value) in pairs(query) {
        match &*name {
            b"limit" => set_once(&mut limit, "limit", page_limit(&value)?)?,
            b"page_token" => {
                let text = String::from_utf8(value.into_owned())
                    .map_err(|_| ApiError::bad_request("`page_token` is not UTF-8"))?;
                set_once(&mut page_token, "page_token", text)?;
            }
            _ => {}
        }
    }
    let page_token = page_token.filter(|token| !token.is_empty());
    Ok(TopicListParams { limit: limit.unwrap_or(TOPIC_PAGE_DEFAULT), page_token })
}

/// A page's `limit`: a positive decimal integer, any number of digits; past the maximum, the
/// maximum.
fn page_limit(value: &[u8]) -> Result<u32, ApiError> {
    let digits = !value.is_empty() && value.iter().all(u8::is_ascii_digit);
    if !digits || value.iter().all(|&d| d == b'0') {
        let shown = String::from_utf8_lossy(value);
        return Err(ApiError::bad_request(format!(
            "query parameter `limit` must be a positive integer, got {shown:?}"
        )));
    }
    let asked: u64 =
        std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
    Ok(asked.min(u64::from(TOPIC_PAGE_MAX)) as u32)
}

/// Parses the query string of `GET /v1/topics/{t}`: the one `partition` to show, if any.
pub fn topic_params(query: Option<&str>) -> Result<Option<u32>, ApiError> {
    let mut partition = None;
    for (name, value) in pairs(query) {
        if &*name == b"partition" {
            set_once(&mut partition, "partition", number("partition", &value)?)?;
        }
    }
    Ok(partition)
}

/// Parses the produce query string.
pub fn produce_params(query: Option<&str>) -> Result<ProduceParams, ApiError> {
    let mut params = ProduceParams::default();
    let (mut seen_key, mut seen_partition) = (false, false);
    for (name, value) in pairs(query) {
        match &*name {
            b"key" => {
                once(&mut seen_key, "key")?;
                params.key = (!value.is_empty()).then(|| Bytes::copy_from_slice(&value));
            }
            b"partition" => {
                once(&mut seen_partition, "partition")?;
                params.partition = Some(number("partition", &value)?);
            }
            _ => {}
        }
    }
    Ok(params)
}

/// Checks the batch produce query string: a batch takes `key` and `partition` per message in its
/// body, so either one in the query is a 400 that names it (other parameters are ignored).
pub fn batch_params(query: Option<&str>) -> Result<(), ApiError> {
    for (name, _) in pairs(query) {
        if let Some(param) = [&b"key"[..], b"partition"].into_iter().find(|p| *p == &*name) {
            let param = String::from_utf8_lossy(param);
            return Err(ApiError::bad_request(format!(
                "query parameter `{param}` is not taken by a batch produce: give each message \
                 its own \"{param}\" in the body"
            )));
        }
    }
    Ok(())
}

/// Parses the ack query string.
pub fn settle_params(query: Option<&str>) -> Result<SettleParams, ApiError> {
    let (mut handle, mut extend) = (None, None);
    for (name, value) in pairs(query) {
        match &*name {
            b"receipt_handle" => {
                let text = String::from_utf8(value.into_owned())
                    .map_err(|_| ApiError::bad_request("`receipt_handle` is not UTF-8"))?;
                set_once(&mut handle, "receipt_handle", text)?;
            }
            b"extend" => set_once(&mut extend, "extend", value.into_owned())?,
            _ => {}
        }
    }
    let action = super::queue::settle_action(extend.as_deref())?;
    Ok(SettleParams { receipt_handle: handle, action })
}

/// Parses the consume query string: `partition` is required with `offset`.
pub fn consume_params(query: Option<&str>) -> Result<ConsumeParams, ApiError> {
    let (mut partition, mut offset, mut max, mut wait_ms) = (None, None, None, None);
    for (name, value) in pairs(query) {
        match &*name {
            b"partition" => set_once(&mut partition, "partition", number("partition", &value)?)?,
            b"offset" => set_once(&mut offset, "offset", number("offset", &value)?)?,
            b"max" => set_once(&mut max, "max", number("max", &value)?)?,
            b"wait" => set_once(&mut wait_ms, "wait", duration_ms(&value)?)?,
            _ => {}
        }
    }
    if offset.is_some() && partition.is_none() {
        return Err(ApiError::bad_request(
            "query parameter `partition` is required with `offset` (a replay)",
        ));
    }
    if max == Some(0) {
        return Err(ApiError::bad_request("`max` must be at least 1"));
    }
    Ok(ConsumeParams { partition, offset, max, wait_ms })
}

/// A `wait` as the original Narad takes it: a Go duration (`500ms`, `5s`, `1.5s`, `1m30s`;
/// units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; at most about 292 years), where a bare number
/// is an error except `0`, a negative duration and an empty value mean no wait. Rounded up to whole milliseconds (a positive wait
/// never becomes 0); saturates far beyond any clamp.
pub fn duration_ms(value: &[u8]) -> Result<u64, ApiError> {
    if value.is_empty() {
        return Ok(0); // `wait=`: the original takes an empty value as no wait
    }
    let text = std::str::from_utf8(value).ok();
    let nanos = text.and_then(go_duration_nanos).ok_or_else(|| {
        let shown = String::from_utf8_lossy(value);
        ApiError::bad_request(format!(
            "query parameter `wait` must be a duration such as `500ms` or `5s`, got {shown:?}"
        ))
    })?;
    let millis = nanos.max(0).unsigned_abs().div_ceil(1_000_000);
    Ok(u64::try_from(millis).unwrap_or(u64::MAX))
}

/// Nanoseconds of a Go duration string, or `None` if it is not one.
fn go_duration_nanos(text: &str) -> Option<i128> {
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None; // a sign alone
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(digits);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return None;
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, tail) = after.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None, // a missing or unknown unit
        };
        let whole: i128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let mut part = whole.checked_mul(scale)?;
        let mut denominator = 1_i128;
        for digit in fraction.bytes().take(18) {
            denominator *= 10;
            part = part.checked_add(i128::from(digit - b'0') * scale / denominator)?;
        }
        total = total.checked_add(part).filter(|&t| t <= i128::from(i64::MAX))?;
        rest = tail;
    }
    Some(if negative { -total } else { total })
}

fn once(seen: &mut bool, name: &str) -> Result<(), ApiError> {
    if std::mem::replace(seen, true) {
        return Err(ApiError::bad_request(format!(
            "query parameter `{name}` given more than once"
        )));
    }
    Ok(())
}

fn set_once<T>(slot: &mut Option<T>, name: &str, value: T) -> Result<(), ApiError> {
    if slot.replace(value).is_some() {
        return Err(ApiError::bad_request(format!(
            "query parameter `{name}` given more than once"
        )));
    }
    Ok(())
}

/// A non-negative decimal integer.
fn number<T: std::str::FromStr>(name: &str, value: &[u8]) -> Result<T, ApiError> {
    std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()).ok_or_else(|| {
        let shown = String::from_utf8_lossy(value);
        ApiError::bad_request(format!(
            "query parameter `{name}` must be a non-negative integer in range, got {shown:?}"
        ))
    })
}

/// The decoded `name=value` pairs of a query string (`+` is a space, `%XX` a byte).
fn pairs(query: Option<&str>) -> impl Iterator<Item = (Cow<'_, [u8]>, Cow<'_, [u8]>)> {
    query.unwrap_or("").split('&').filter(|pair| !pair.is_empty()).map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(name), decode(value))
    })
}

fn decode(raw: &str) -> Cow<'_, [u8]> {
    if !raw.contains(['%', '+']) {
        return Cow::Borrowed(raw.as_bytes());
    }
    let spaced = raw.replace('+', " ");
    Cow::Owned(percent_decode(spaced.as_bytes()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_list_limits_and_tokens() {
        let p = topic_list_params(None).expect("empty");
        assert_eq!(p, TopicListParams { limit: TOPIC_PAGE_DEFAULT, page_token: None });
        let p = topic_list_params(Some("limit=2&page_token=orders.eu&x=1")).expect("valid");
        assert_eq!((p.limit, p.page_token.as_deref()), (2, Some("orders.eu")));
        let p = topic_list_params(Some("limit=5000&page_token=")).expect("large");
        assert_eq!((p.limit, p.page_token), (TOPIC_PAGE_MAX, None), "clamped; empty token");
        let p = topic_list_params(Some("limit=99999999999999999999999")).expect("past u64");
        assert_eq!(p.limit, TOPIC_PAGE_MAX);
        for query in ["limit=0", "limit=00", "limit=-1", "limit=x", "limit=", "limit=1&limit=2"] {
            assert!(topic_list_params(Some(query)).is_err(), "{query} must be rejected");
        }
        assert!(topic_list_params(Some("page_token=%ff")).is_err(), "not UTF-8");
    }

    #[test]
    fn topic_partition_filter() {
        assert_eq!(topic_params(None).expect("none"), None);
        assert_eq!(topic_params(Some("partition=2&other")).expect("valid"), Some(2));
        for query in ["partition=x", "partition=-1", "partition=1&partition=1"] {
            assert!(topic_params(Some(query)).is_err(), "{query} must be rejected");
        }
    }

    #[test]
    fn produce_keys_and_partitions() {
        assert_eq!(produce_params(None).expect("empty"), ProduceParams::default());
        let p = produce_params(Some("key=a%20b+c&partition=3&other=x")).expect("valid");
        assert_eq!(p.key.as_deref(), Some(&b"a b c"[..]));
        assert_eq!(p.partition, Some(3));
        let p = produce_params(Some("key=&partition=0")).expect("valid");
        assert_eq!(p.key, None);
        let p = produce_params(Some("key=%ff%00")).expect("binary key");
        assert_eq!(p.key.as_deref(), Some(&[0xff, 0][..]));
    }

    #[test]
    fn produce_rejects_bad_partitions() {
        for query in ["partition=abc", "partition=-1", "partition=", "partition=1&partition=1"] {
            assert!(produce_params(Some(query)).is_err(), "{query} must be rejected");
        }
        assert!(produce_params(Some("partition=99999999999")).is_err());
        assert!(produce_params(Some("key=a&key=b")).is_err());
    }

    /// Issue 12: `?key=` or `?partition=` on a batch was accepted and ignored.
    #[test]
    fn batch_refuses_key_and_partition_in_the_query() {
        assert!(batch_params(None).is_ok());
        assert!(batch_params(Some("other=1&wait=2")).is_ok());
        for (query, name) in [("key=k", "key"), ("a=1&partition=0", "partition"), ("key", "key")] {
            let err = batch_params(Some(query)).expect_err("must be refused");
            assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST);
            assert!(format!("{err:?}").contains(&format!("`{name}`")), "{query}: {err:?}");
        }
    }

    #[test]
    fn consume_params_parse() {
        let c = consume_params(Some("partition=2&offset=10&max=5")).expect("valid");
        let replay =
            ConsumeParams { partition: Some(2), offset: Some(10), max: Some(5), wait_ms: None };
        assert_eq!(c, replay);
        let c = consume_params(Some("partition=0")).expect("a queue receive on one partition");
        let one = ConsumeParams { partition: Some(0), offset: None, max: None, wait_ms: None };
        assert_eq!(c, one);
        let c = consume_params(None).expect("a queue receive on the topic");
        assert_eq!(c, ConsumeParams { partition: None, offset: None, max: None, wait_ms: None });
        let c = consume_params(Some("partition=0&offset=1&wait=5s")).expect("a long-poll");
        assert_eq!(c.wait_ms, Some(5_000));
        assert!(consume_params(Some("offset=1")).is_err(), "partition is required with offset");
        assert!(consume_params(Some("partition=1&max=0")).is_err());
        assert!(consume_params(Some("partition=x")).is_err());
        assert!(consume_params(Some("partition=0&offset=0&wait=1s&wait=2s")).is_err());
    }

    /// `wait` follows the original's Go durations: units required (a bare number is a 400,
    /// except `0`), fractions and compound values allowed, negatives mean no wait.
    #[test]
    fn waits_are_go_durations() {
        let ms = |text: &str| duration_ms(text.as_bytes()).ok();
        assert_eq!(ms("5s"), Some(5_000));
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("0.3s"), Some(300));
        assert_eq!(ms("1.5s"), Some(1_500));
        assert_eq!(ms("1m30s"), Some(90_000));
        assert_eq!(ms("2h"), Some(7_200_000));
        assert_eq!(ms("0"), Some(0));
        assert_eq!(ms("0s"), Some(0));
        assert_eq!(ms("1us"), Some(1), "a positive wait never rounds to none");
        assert_eq!(ms("250\u{b5}s"), Some(1));
        assert_eq!(ms("-3s"), Some(0), "a negative wait is no wait");
        assert_eq!(ms(".5s"), Some(500));
        assert_eq!(ms("99999999999999h"), None, "out of range");
        assert_eq!(ms(""), Some(0), "an empty value is no wait, as in the original");
        for bad in ["5", "10", "s", "5x", "1.2.3s", "5 s", "-", "ms5", "1e3ms", "%ff"] {
            assert_eq!(ms(bad), None, "{bad:?} must be refused");
        }
    }
}
