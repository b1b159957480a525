//! Small newtypes for the identities and quantities that cross module boundaries. Keeping them
//! distinct types stops a node id from being passed where a topic id or a request id is expected.
//! (WAL sequence numbers are still plain `u64`, bounded by `constants::MAX_WAL_SEQ`.)

use std::fmt;

/// Microseconds since the Unix epoch, as the runtime saw it. The core never reads a clock: every
/// input is stamped with the `Instant` at which it happened. Both runtimes keep it monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `millis` milliseconds after this one.
    pub fn plus_millis(self, millis: u64) -> Instant {
        Instant(self.0.saturating_add(millis.saturating_mul(1_000)))
    }

    /// The instant `micros` microseconds after this one.
    pub fn plus_micros(self, micros: u64) -> Instant {
        Instant(self.0.saturating_add(micros))
    }

    /// Milliseconds since the Unix epoch (record timestamps are stored in milliseconds).
    pub fn as_millis(self) -> u64 {
        self.0 / 1_000
    }

    /// Microseconds elapsed since `earlier` (zero if `earlier` is later).
    pub fn micros_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Identity of a node in the cluster (1-based in configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// Incarnation id of a topic: a topic deleted and created again under the same name gets a new
/// id, so records staged for the old incarnation can never land in the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub u64);

/// Identifies one client request; the runtime keeps whatever it needs to answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies one disk operation; its completion echoes the token back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IoToken(pub u64);

/// A destination of dispatch: one partition of one topic incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    /// Topic incarnation.
    pub topic: TopicId,
    /// Partition index within the topic.
    pub partition: u32,
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "topic#{}/p{}", self.topic.0, self.partition)
    }
}
