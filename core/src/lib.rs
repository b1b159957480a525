//! narad-core: all of Narad's broker logic as a deterministic, sans-IO state machine.
//!
//! A runtime creates a [`Node`] from the bytes of its files ([`Node::recover`]), feeds it
//! [`Input`]s stamped with the time they happened, executes the [`Effect`]s it returns (disk
//! operations and client replies) and arms a timer for [`Node::poll_timeout`]. The core performs no
//! I/O, reads no clock, draws randomness only from the seed it was given and never iterates a
//! hash map, so the same inputs always give the same outputs: that is what lets the simulator
//! reproduce any run bit for bit.
//!
//! The drain rule: after feeding inputs, drain `poll_effect` to `None`, then `poll_event`, then
//! re-arm the timer; the core answers the same whether one input or many came between drains.
//! The tokio runtime feeds up to 256 inputs of one channel (disk completions, peer messages or
//! client requests) per wakeup before it drains, a timer expiry or the shutdown signal alone;
//! the simulator batches the same way in a share of its seeds (docs/contributing.md).
#![forbid(unsafe_code)]
#![warn(clippy::too_many_lines)]

pub mod accept;
pub mod access;
pub mod api;
pub mod codec;
pub mod constants;
pub mod dispatch;
pub mod fnv;
pub mod ids;
pub mod io;
pub mod meta;
pub mod node;
pub mod partition;
pub mod peer;
pub mod queue;
pub mod quota;
pub mod recovery_error;
pub mod wal;

#[cfg(test)]
mod tests;

pub use api::{
    ClientError, ClientOp, ClientReply, ConsumedRecord, MemberView, ProduceMessage, Stats,
    TopicChange,
};
pub use ids::{Instant, IoToken, NodeId, PartitionKey, RequestId, TopicId};
pub use io::{
    DiskDone, DiskError, DiskOp, Effect, FileId, Input, NodeEvent, TopicApplied, UserApplied,
};
pub use node::{Config, Node, Recovery};
pub use partition::{PartitionLog, PartitionScan};
pub use recovery_error::RecoveryError;
