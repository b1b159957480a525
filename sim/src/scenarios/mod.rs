//! Named, hand-written fault scenarios (filled in below).
