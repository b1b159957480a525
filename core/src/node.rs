//! `Node`: one broker node as a sans-IO state machine. It composes the ingress WAL, the topic
//! catalogue, the partition logs and the dispatcher, routes disk completions back to the
//! component that asked, and turns client requests into replies.
//!
//! Driving loop (both runtimes): feed an input with `handle_input` (or `handle_timeout` when the
//! deadline from `poll_timeout` passes), then drain `poll_effect` to `None`, execute each effect,
//! and re-arm the timer with `poll_timeout`.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::api::Stats;
use crate::ids::{Instant, NodeId};
use crate::io::{Effect, FileId, Input, NodeEvent};

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id (1 for a single node).
    pub node_id: NodeId,
    /// Seed for every random choice the node makes (e.g. the first keyless partition per topic).
    pub seed: u64,
}

/// Recovery found damage it must not repair silently.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    #[error("{file}: corrupt frame at byte {bad_pos} followed by valid data at byte {next_valid_pos}; refusing to truncate acknowledged records")]
    CorruptLog { file: String, bad_pos: u64, next_valid_pos: u64 },
    #[error("{file}: {what}")]
    Inconsistent { file: String, what: String },
}

/// One broker node.
pub struct Node {
    _private: (),
}

impl Node {
    /// Rebuilds a node from the bytes of every file it owns (as found on disk at start-up).
    /// Torn tails are truncated by the first effects the node emits; it is ready once they are done.
    pub fn recover(
        config: Config,
        now: Instant,
        files: BTreeMap<FileId, Bytes>,
    ) -> Result<Node, RecoveryError> {
        let _ = (config, now, files);
        todo!()
    }

    /// Feeds one input.
    pub fn handle_input(&mut self, now: Instant, input: Input) {
        let _ = (now, input);
        todo!()
    }

    /// Called when the deadline from `poll_timeout` has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
        todo!()
    }

    /// Next effect to execute; drain to `None` after every input.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        todo!()
    }

    /// Next event for checkers and logs; optional to drain (bounded: the oldest are dropped past 65,536).
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        todo!()
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }

    /// Counters and gauges.
    pub fn stats(&self) -> Stats {
        todo!()
    }

    /// True once recovery's repairs are durable and the node serves requests.
    pub fn is_ready(&self) -> bool {
        todo!()
    }

    /// True once, after `Input::BeginShutdown`, nothing is in flight and the checkpoint is durable.
    pub fn is_shut_down(&self) -> bool {
        todo!()
    }
}
