//! The sans-IO boundary: what a runtime feeds into a `Node` (`Input`) and what the node asks the
//! runtime to do (`Effect`). Both runtimes (tokio and the simulator) implement exactly this
//! contract, so the simulator tests the code that runs in production.
//!
//! Disk contract: operations on the *same file* complete in the order they were emitted (a runtime
//! may run operations on different files concurrently). Every operation completes exactly once
//! with `Input::Disk { token, result }`, unless the process dies first. Before `Node::recover`,
//! the runtime makes the directory entries of the files it hands over durable (fsyncs the data
//! directories); the node then syncs each file's contents before it trusts them.

use bytes::Bytes;

use crate::access::Principal;
use crate::api::{ClientOp, ClientReply};
use crate::ids::{IoToken, NodeId, PartitionKey, RequestId, TopicId};

/// A file the node owns, named logically. `relative_path` maps it below the data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileId {
    /// An ingress WAL segment, named by the sequence number of its first record.
    WalSegment {
        /// Sequence number of the segment's first record.
        first_seq: u64,
    },
    /// The WAL checkpoint: first sequence number not yet dispatched (two slots, rewritten in place).
    WalCheckpoint,
    /// One segment of the log of one partition of one topic incarnation: the records from
    /// offset `base` on, up to the next segment's base.
    PartitionSegment { key: PartitionKey, base: u64 },
    /// The seal file of the partition segment starting at `base`: a small summary that lets
    /// start-up take the segment back without reading it (`partition::seal`, docs/design.md
    /// §4.4). Written in the background; a missing or damaged one only costs a scan.
    PartitionSeal { key: PartitionKey, base: u64 },
    /// The metastore's Raft log (entries and hard state), append-only.
    MetaRaftLog,
    /// The metastore's latest snapshot (state machine image plus its Raft metadata).
    MetaSnapshot,
    /// The consumer journal (`queue::journal`): acks and delivery counts of queue consumers,
    /// numbered from 0; a compaction writes the next number and deletes the one before.
    ConsumerJournal { number: u64 },
}

impl FileId {
    /// Path of the file relative to the data directory, using `/` separators.
    pub fn relative_path(&self) -> String {
        match self {
            FileId::WalSegment { first_seq } => format!("wal/{first_seq:020}.wal"),
            FileId::WalCheckpoint => "wal/checkpoint".to_string(),
            // The first segment keeps the name a partition's single-file log always had.
            FileId::PartitionSegment { key, base: 0 } => {
                format!("partitions/{:020}/{:05}.log", key.topic.0, key.partition)
            }
            FileId::PartitionSegment { key, base } => {
                format!("partitions/{:020}/{:05}-{base:020}.log", key.topic.0, key.partition)
            }
            FileId::PartitionSeal { key, base } => {
                format!("partitions/{:020}/{:05}-{base:020}.seal", key.topic.0, key.partition)
            }
            FileId::MetaRaftLog => "meta/raft.log".to_string(),
            FileId::MetaSnapshot => "meta/snapshot".to_string(),
            FileId::ConsumerJournal { number } => format!("consumers/{number:020}.journal"),
        }
    }

    /// Inverse of `relative_path`; `None` for files the node does not own. Only the exact
    /// name `relative_path` gives is accepted (no sign, no other number of digits), so two
    /// names never map to one file.
    pub fn parse(path: &str) -> Option<FileId> {
        let file = FileId::parse_loosely(path)?;
        (file.relative_path() == path).then_some(file)
    }

    fn parse_loosely(path: &str) -> Option<FileId> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["wal", "checkpoint"] => Some(FileId::WalCheckpoint),
            ["wal", name] => {
                let first_seq = name.strip_suffix(".wal")?.parse().ok()?;
                Some(FileId::WalSegment { first_seq })
            }
            ["meta", "raft.log"] => Some(FileId::MetaRaftLog),
            ["meta", "snapshot"] => Some(FileId::MetaSnapshot),
            ["consumers", name] => {
                let number = name.strip_suffix(".journal")?.parse().ok()?;
                Some(FileId::ConsumerJournal { number })
            }
            ["partitions", topic, name] if name.ends_with(".seal") => {
                let topic = TopicId(topic.parse().ok()?);
                let (partition, base) = name.strip_suffix(".seal")?.split_once('-')?;
                let key = PartitionKey { topic, partition: partition.parse().ok()? };
                Some(FileId::PartitionSeal { key, base: base.parse().ok()? })
            }
            ["partitions", topic, name] => {
                let topic = TopicId(topic.parse().ok()?);
                let name = name.strip_suffix(".log")?;
                let (partition, base) = match name.split_once('-') {
                    Some((partition, base)) => (partition, base.parse().ok()?),
                    None => (name, 0),
                };
                let key = PartitionKey { topic, partition: partition.parse().ok()? };
                Some(FileId::PartitionSegment { key, base })
            }
            _ => None,
        }
    }
}

/// One disk operation for the runtime to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// Create the file empty (truncating it if it exists) and make its directory entry durable
    /// (fsync the directory).
    Create { file: FileId },
    /// Write `data` at `offset` (positional; extends the file as needed). Not durable until `Sync`.
    Write { file: FileId, offset: u64, data: Bytes },
    /// Make everything written to the file durable (`fdatasync`).
    Sync { file: FileId },
    /// Read exactly `len` bytes at `offset` (a file that ends sooner is an error).
    Read { file: FileId, offset: u64, len: u64 },
    /// Read `len` bytes at `offset`, or fewer where the file ends sooner (none at or past its
    /// end). For a reader that must see what a file really holds, not only whether it holds
    /// what was expected: the WAL's dispatch cursor, whose segment can end short of what the
    /// WAL wrote when a write landed elsewhere (docs/design.md §4.2).
    ReadUpTo { file: FileId, offset: u64, len: u64 },
    /// Set the file's length to `len` (not durable until `Sync`).
    Truncate { file: FileId, len: u64 },
    /// Remove the file (and make the removal durable).
    Delete { file: FileId },
}

impl DiskOp {
    /// The file this operation touches.
    pub fn file(&self) -> FileId {
        match self {
            DiskOp::Create { file }
            | DiskOp::Write { file, .. }
            | DiskOp::Sync { file }
            | DiskOp::Read { file, .. }
            | DiskOp::ReadUpTo { file, .. }
            | DiskOp::Truncate { file, .. }
            | DiskOp::Delete { file } => *file,
        }
    }
}

/// Successful completion of a `DiskOp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskDone {
    /// Create, Write, Sync, Truncate or Delete finished.
    Done,
    /// A Read returned these bytes (exactly the requested length), or a ReadUpTo these (at most
    /// the requested length).
    Data(Bytes),
}

/// Failed completion of a `DiskOp`. The core never sees `std::io::Error`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiskError {
    /// The device is full (ENOSPC / EDQUOT).
    #[error("no space left on device")]
    NoSpace,
    /// Any other failure, described for the logs.
    #[error("i/o error: {0}")]
    Io(String),
}

/// Everything a runtime feeds into a node.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client request (HTTP in production, the workload in the simulator), from `who`.
    Client { request: RequestId, op: ClientOp, who: Principal },
    /// Completion of the disk operation the node emitted with `token`.
    Disk { token: IoToken, result: Result<DiskDone, DiskError> },
    /// Bytes from another node (a `peer::PeerMessage`), over an authenticated connection: the
    /// transport, not the message, says who sent it.
    Peer { from: NodeId, bytes: Bytes },
    /// The transport could not deliver to `to`: it dropped a message for want of a connection
    /// (or a full queue), or the connection was lost. The node fails what it awaits from `to`
    /// now (commits retry after their backoff; idempotent commits make a retry of a commit that
    /// did land harmless; forwarded requests answer 503) instead of waiting out the timeouts.
    PeerUnreachable { to: NodeId },
    /// Stop accepting produces, finish in-flight group commits, flush the checkpoint. The runtime
    /// keeps driving the node until `Node::is_shut_down` is true.
    BeginShutdown,
}

/// Everything a node asks its runtime to do.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Perform a disk operation and answer with `Input::Disk { token, .. }`.
    Disk { token: IoToken, op: DiskOp },
    /// Answer a client request.
    Reply { request: RequestId, reply: ClientReply },
    /// Send bytes (an encoded `peer::PeerMessage`) to another node. Best effort: the node copes
    /// with loss (timeouts, retries), so a runtime may drop a message it cannot deliver.
    Send { to: NodeId, bytes: Bytes },
}

/// What the node reports happened, for checkers and logs (drained with `Node::poll_event`).
/// The simulator's invariant checkers consume these; the tokio runtime ignores most of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// Records became visible on a partition: offsets `first_offset..first_offset + origins.len()`.
    /// `origins` are the WAL sequence numbers the records came from, in offset order.
    Committed {
        key: PartitionKey,
        first_offset: u64,
        /// The node whose WAL the records came from.
        origin: NodeId,
        origins: Vec<u64>,
    },
    /// The WAL checkpoint became durable at `checkpoint` (first sequence not yet done).
    CheckpointDurable { checkpoint: u64 },
    /// A WAL record was discarded because its topic incarnation is gone (leader-confirmed).
    Discarded { seq: u64, topic: TopicId },
    /// WAL records were found damaged at rest by the dispatcher and are lost (their only copy):
    /// reported loudly, then skipped so the records behind them still flow.
    RecordsLost { seqs: std::ops::Range<u64> },
    /// WAL records of a chunked bulk request whose last chunk never reached the WAL (found at
    /// start-up) were dropped without a commit: the request was never acknowledged, and applies
    /// whole or not at all.
    RecordsAbandoned { seqs: Vec<u64> },
    /// The WAL latched after a write or fsync failure: no further produce is acknowledged.
    WalLatched,
    /// A partition log's commit failed (fsync, write or read-back) and was rolled back.
    CommitFailed { key: PartitionKey, reason: String },
    /// This node's metastore replica applied a committed topic create, update or delete, the
    /// entry at Raft log `index`; `topic` is the topic as the change left it (a delete: as it
    /// was). Entries replayed after a restart are reported again; a snapshot installed from the
    /// leader reports nothing. Checkers rebuild the topic history from these (admin answers are
    /// checked against it).
    TopicApplied { index: u64, change: TopicApplied, topic: crate::api::TopicInfo },
    /// Retention deleted the oldest sealed segment of a partition (the deletion is durable):
    /// `trimmed` says what it held and where the log starts now; `now_ms` is the owner's clock
    /// when the deletion completed (it was judged past retention when it was started, earlier).
    SegmentDeleted { key: PartitionKey, trimmed: crate::partition::Trimmed, now_ms: u64 },
    /// This node's metastore replica applied a committed user create, change or delete, the
    /// entry at Raft log `index` (replayed entries are reported again after a restart).
    /// Checkers rebuild the users' history from these (every grant check is judged against it).
    UserApplied { index: u64, change: UserApplied },
    /// This replica's users are now as the log's first `index` entries left them (recovered
    /// from its snapshot, or a snapshot installed from the leader): what it checks grants with
    /// until its next `UserApplied`.
    UsersReplaced { index: u64 },
    /// The message at `key`@`offset` was moved to its topic's dead-letter topic: its copy was
    /// durable in this node's ingress WAL before the original's ack (now durable) was written.
    DeadLettered { key: PartitionKey, offset: u64 },
    /// `payer`'s produce quota is spent by a produce just admitted: the node takes no more
    /// from it for `wait_us` (a runtime may refuse its produces meanwhile without reading them).
    QuotaSpent { payer: crate::quota::Payer, wait_us: u64 },
}

/// Which user change a `NodeEvent::UserApplied` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserApplied {
    /// Created or changed: the user as it is now.
    Put(crate::access::UserInfo),
    /// Incarnation `id` of `name` was deleted.
    Removed { name: String, id: crate::access::UserId },
}

/// Which topic change a `NodeEvent::TopicApplied` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicApplied {
    Created,
    /// The retention of a live incarnation changed.
    Updated,
    Deleted,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_id_round_trips_through_its_path() {
        let key = PartitionKey { topic: TopicId(7), partition: 3 };
        for file in [
            FileId::WalSegment { first_seq: 42 },
            FileId::WalCheckpoint,
            FileId::PartitionSegment { key, base: 0 },
            FileId::PartitionSegment { key, base: 1 },
            FileId::PartitionSegment { key, base: u64::MAX },
            FileId::PartitionSeal { key, base: 0 },
            FileId::PartitionSeal { key, base: 42 },
            FileId::PartitionSeal { key, base: u64::MAX },
            FileId::MetaRaftLog,
            FileId::MetaSnapshot,
            FileId::ConsumerJournal { number: 0 },
            FileId::ConsumerJournal { number: u64::MAX },
        ] {
            assert_eq!(FileId::parse(&file.relative_path()), Some(file));
        }
        assert_eq!(FileId::parse("wal/notes.txt"), None);
        assert_eq!(FileId::parse("partitions/x/00001.log"), None);
        let segment = "partitions/00000000000000000007/00003-00000000000000000042.log";
        assert_eq!(FileId::parse(segment), Some(FileId::PartitionSegment { key, base: 42 }));
        let seal = "partitions/00000000000000000007/00003-00000000000000000042.seal";
        assert_eq!(FileId::parse(seal), Some(FileId::PartitionSeal { key, base: 42 }));
    }

    /// Found by reading (issue 9): `+1` and other spellings of a number parsed, so two names on
    /// disk could stand for one file and one would silently shadow the other.
    #[test]
    fn only_the_canonical_name_of_a_file_parses() {
        let one = FileId::WalSegment { first_seq: 1 };
        assert_eq!(FileId::parse("wal/00000000000000000001.wal"), Some(one));
        for alias in [
            "wal/+0000000000000000001.wal",
            "wal/1.wal",
            "wal/000000000000000000001.wal",
            "partitions/+0000000000000000007/00003.log",
            "partitions/00000000000000000007/3.log",
            "partitions/00000000000000000007/+0003.log",
            "partitions/00000000000000000007/00003-00000000000000000000.log",
            "partitions/00000000000000000007/00003-1.log",
            "partitions/00000000000000000007/00003-+0000000000000000001.log",
            "partitions/00000000000000000007/00003.seal",
            "partitions/00000000000000000007/00003-1.seal",
            "partitions/00000000000000000007/00003-00000000000000000001.seal.log",
        ] {
            assert_eq!(FileId::parse(alias), None, "{alias}");
        }
    }
}
