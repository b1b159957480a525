//! Fuzzes the metastore's state image (`core/src/meta/state.rs` `MetaState::encode/decode`, the
//! bytes inside every snapshot): an image that decodes is the canonical encoding of its state
//! (`decode(b) == Some(s)` implies `s.encode() == b`, so two replicas never disagree on the bytes
//! of one state), and a state built by applying commands from the input round-trips exactly.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use narad_core::meta::state::MetaState;
use narad_fuzz::values;

fuzz_target!(|data: &[u8]| {
    if let Some(state) = MetaState::decode(data) {
        assert_eq!(state.encode(), data, "non-canonical image decoded as {state:?}");
    }
    let state = applied_state(&mut Unstructured::new(data));
    assert_eq!(MetaState::decode(&state.encode()), Some(state), "round trip");
});

/// The state after applying up to 32 commands drawn from the input (refused ones change nothing).
fn applied_state(u: &mut Unstructured<'_>) -> MetaState {
    let mut state = MetaState::new();
    for _ in 0..32 {
        let Ok(command) = values::command(u, true) else { break };
        let _ = state.apply(command);
    }
    state
}
