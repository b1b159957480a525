//! Carrying out one `Op` of the active phase on the harness.

use bytes::Bytes;
use narad_core::peer::PeerMessage;
use narad_core::{Input, NodeId};

use super::harness::Harness;
use super::input::{Op, Span};
use super::skip_known_defects;
use super::values::allowed_message;

/// Simulated time one `Settle` lets pass.
const SETTLE_MICROS: u64 = 1_000_000;

impl Harness {
    /// Applies `op`.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Client(cmd) => {
                let op = self.values.client_op(cmd);
                self.client(op);
            }
            Op::Peer(cmd) => {
                self.values.seen_topics.clone_from(&self.oracle.topics_seen);
                if let Some((from, bytes)) = self.values.peer_message(cmd) {
                    self.peer(from, bytes);
                }
            }
            Op::Complete { pick } => {
                if let Some(pending) = self.disk.pop_pick(*pick) {
                    self.complete(pending, None);
                }
            }
            Op::Fail { pick, error } => {
                if let Some(pending) = self.disk.pop_pick(*pick) {
                    self.complete(pending, Some(*error));
                }
            }
            Op::CompleteAll => self.complete_all(),
            Op::Advance { time } => self.advance(span_micros(*time)),
            Op::Settle => {
                self.run_until(SETTLE_MICROS, |_| false);
            }
            Op::Crash { kind, land } => self.crash_and_restart(*kind, land),
            Op::Shutdown => {
                self.shutting_down = true;
                self.input(Input::BeginShutdown);
            }
            Op::PeerUnreachable => self.input(Input::PeerUnreachable { to: NodeId(2) }),
        }
    }

    /// Delivers bytes from the fake peer, unless they would forge another member (see
    /// `allowed_message`). The records of a commit batch become contents a consumer may read.
    fn peer(&mut self, from: NodeId, bytes: Bytes) {
        match PeerMessage::decode(&bytes) {
            Ok(message) if !allowed_message(&message) => return,
            Ok(PeerMessage::Raft(_)) if skip_known_defects() => return,
            Ok(PeerMessage::CommitBatch { records, .. }) => {
                for record in &records {
                    self.oracle.record_sent(record.key.as_deref(), &record.payload);
                }
            }
            _ => {}
        }
        self.input(Input::Peer { from, bytes });
    }
}

/// Microseconds `span` stands for.
pub fn span_micros(span: Span) -> u64 {
    match span {
        Span::Micros(n) => u64::from(n),
        Span::Centis(n) => u64::from(n) * 10_000,
        Span::QuarterSeconds(n) => u64::from(n) * 250_000,
    }
}
