//! Simulated runtime (in progress).
