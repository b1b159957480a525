//! narad-sim-runtime: the simulated runtime that drives `narad-core` deterministically.
//!
//! It provides what the tokio runtime provides in production, but controlled by one seed: a
//! clock and event queue ([`clock`]), a disk per node that keeps volatile and durable bytes
//! apart and misbehaves on purpose ([`disk`]), a host per node that runs the sans-IO drain loop
//! and can crash, pause and restart the node ([`host`]), independent random streams per
//! component ([`rng`]), the network between nodes with its faults ([`net`]), fault classes with
//! hit counters ([`fault`]) and a stable trace hash ([`hash`]). Workloads, checkers and the CLI
//! live in the `narad-sim` crate.
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

pub mod clock;
pub mod disk;
pub mod fault;
pub mod hash;
pub mod host;
pub mod net;
pub mod rng;

pub use clock::EventQueue;
pub use disk::{Damage, DiskFaults, FileClass, FileMatch, SimDisk};
pub use fault::{FaultClass, FaultHits};
pub use hash::TraceHash;
pub use host::{ClockSkew, HostRuntime, NodeHost};
pub use net::{Fate, Link, NetFaults, SimNetwork};
pub use rng::{Component, component_rng, component_seed};
