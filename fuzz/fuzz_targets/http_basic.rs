//! Fuzzes the HTTP Basic credential parser (`runtime-tokio/src/auth/basic.rs`): untrusted
//! `Authorization` header bytes never panic, credentials it accepts have a non-empty name and
//! come back unchanged through the header a client would send, and anything longer than the
//! bound is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use narad::fuzzing::{MAX_AUTHORIZATION_BYTES, basic_header_value, parse_basic};

fuzz_target!(|data: &[u8]| {
    let parsed = parse_basic(data);
    if data.len() > MAX_AUTHORIZATION_BYTES {
        assert!(parsed.is_err(), "an oversized header was accepted");
    }
    let Ok(credentials) = parsed else { return };
    assert!(!credentials.name.is_empty() && !credentials.name.contains(':'));
    let again = basic_header_value(&credentials.name, &credentials.password);
    let reparsed = parse_basic(again.as_bytes()).expect("a header we write parses");
    assert_eq!(reparsed, credentials);
});
