//! Helpers shared by the fuzz targets in `fuzz_targets/`: an allocation-counting global allocator
//! (to check that decoders allocate in proportion to their input), a chunking plan the fuzzer
//! chooses, and the generator of the seed corpus (`seeds`). Nothing here is fuzzed itself.

pub mod alloc;
pub mod chunks;
pub mod seeds;
pub mod values;
