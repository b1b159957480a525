//! Fuzzes the metastore command codec (`core/src/meta/command.rs`): bytes that decode are the
//! canonical encoding of their command (`encode(decode(b)) == b`), and any command built from the
//! input survives `decode(encode(c)) == c`.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use narad_core::meta::{decode_command, encode_command};
use narad_fuzz::values;

fuzz_target!(|data: &[u8]| {
    if let Some(command) = decode_command(data) {
        assert_eq!(encode_command(&command), data, "non-canonical bytes for {command:?}");
    }
    if let Ok(command) = values::command(&mut Unstructured::new(data), false) {
        let encoded = encode_command(&command);
        assert_eq!(decode_command(&encoded), Some(command), "round trip");
    }
});
