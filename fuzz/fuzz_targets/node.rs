//! Whole-node fuzz target: the bytes decode into operations against one node (client requests,
//! fake-peer messages, disk completions in any allowed order, injected errors, time, crashes),
//! checked by the invariants of `narad_sim::nodefuzz`. Saved crashes in `fuzz/regressions/node/`
//! replay under plain `cargo test -p narad-sim --test nodefuzz_regressions`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| narad_sim::nodefuzz::run(data));
