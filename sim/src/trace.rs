//! The event trace: every event the simulation processes, stamped `[t=<sim µs> e=<n>]`. Each
//! record is hashed into the run's trace hash (determinism: same seed, same hash, bit for bit);
//! the last records are kept in a ring for failure reports, and the full trace only on request.

use std::cell::Cell;
use std::fmt;

use narad_core::{DiskOp, FileId, PartitionKey};
use narad_sim_runtime::TraceHash;

/// Kind of a disk operation, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Create,
    Write,
    Sync,
    Read,
    Truncate,
    Delete,
}

impl OpKind {
    /// The kind, offset and length of `op`.
    pub fn of(op: &DiskOp) -> (OpKind, u64, u64) {
        match op {
            DiskOp::Create { .. } => (OpKind::Create, 0, 0),
            DiskOp::Write { offset, data, .. } => (OpKind::Write, *offset, data.len() as u64),
            DiskOp::Sync { .. } => (OpKind::Sync, 0, 0),
            DiskOp::Read { offset, len, .. } | DiskOp::ReadUpTo { offset, len, .. } => {
                (OpKind::Read, *offset, *len)
            }
            DiskOp::Truncate { len, .. } => (OpKind::Truncate, *len, 0),
            DiskOp::Delete { .. } => (OpKind::Delete, 0, 0),
        }
    }
}

/// How a disk operation ended, compactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoneCode {
    Ok,
    NoSpace,
    Io,
}

impl DoneCode {
    /// The code of `result`.
    pub fn of<T>(result: &Result<T, narad_core::DiskError>) -> DoneCode {
        match result {
            Ok(_) => DoneCode::Ok,
            Err(narad_core::DiskError::NoSpace) => DoneCode::NoSpace,
            Err(narad_core::DiskError::Io(_)) => DoneCode::Io,
        }
    }
}

/// What happened.
#[derive(Clone, Copy, Debug)]
pub enum What {
    DiskIssue {
        token: u64,
        kind: OpKind,
        file: FileId,
        offset: u64,
        len: u64,
        at: u64,
    },
    DiskDone {
        token: u64,
        kind: OpKind,
        file: FileId,
        result: DoneCode,
    },
    Timer,
    Request {
        request: u64,
        op: &'static str,
        /// The topic it names (printed, not hashed: like its payload, it follows from the seed).
        topic: TopicTag,
    },
    Refused {
        client: u32,
    },
    Reply {
        request: u64,
        status: u16,
        count: u64,
    },
    Timeout {
        request: u64,
    },
    Committed {
        key: PartitionKey,
        first: u64,
        count: u64,
    },
    Checkpoint {
        checkpoint: u64,
    },
    RecordsLost {
        first: u64,
        count: u64,
    },
    Discarded {
        seq: u64,
        topic: u64,
    },
    Latched,
    CommitFailed {
        key: PartitionKey,
    },
    /// Retention deleted the oldest segment of `key`: it now starts at `log_start`.
    SegmentDeleted {
        key: PartitionKey,
        log_start: u64,
        records: u64,
    },
    Fault {
        action: &'static str,
    },
    Started {
        ok: bool,
    },
    Phase {
        name: &'static str,
    },
    /// A peer message handed to the network. `fate`: 0 lost, 1 or 2 copies on their way,
    /// 3 held on a clogged link, 4 no connection (peer down or cut off).
    Send {
        to: u32,
        tag: u8,
        len: u64,
        fate: u8,
    },
    /// A peer message arrived (`ok`) or was lost on arrival (a cut, or the receiver restarted).
    Deliver {
        from: u32,
        tag: u8,
        len: u64,
        ok: bool,
    },
    /// The node is now the metastore leader (observed).
    Leader,
    /// The node's transport reported `to` unreachable.
    Unreachable {
        to: u32,
    },
}

/// A topic name kept inline (up to 24 bytes) so trace records stay `Copy`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TopicTag {
    len: u8,
    bytes: [u8; 24],
}

impl TopicTag {
    /// The topic `op` names, if any.
    pub fn of(op: &narad_core::ClientOp) -> TopicTag {
        use narad_core::ClientOp as Op;
        let name = match op {
            Op::CreateTopic { name, .. } | Op::DeleteTopic { name } | Op::GetTopic { name, .. } => {
                name
            }
            Op::UpdateTopic { name, .. } => name,
            Op::Produce { topic, .. } | Op::Consume { topic, .. } => topic,
            Op::Receive { topic, .. } | Op::Settle { topic, .. } => topic,
            Op::CreateUser { name, .. } | Op::GetUser { name } | Op::DeleteUser { name } => name,
            Op::SetGrants { name, .. } | Op::SetPassword { name, .. } => name,
            Op::ListTopics { .. } | Op::Members | Op::ListUsers => return TopicTag::default(),
        };
        let mut tag = TopicTag::default();
        let n = name.len().min(tag.bytes.len());
        tag.bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        tag.len = n as u8;
        tag
    }
}

impl fmt::Display for TopicTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.bytes[..usize::from(self.len)]))
    }
}

/// One trace line.
#[derive(Clone, Copy, Debug)]
pub struct TraceRecord {
    pub t: u64,
    pub e: u64,
    pub node: u32,
    pub what: What,
}

const RING: usize = 40;

thread_local! {
    /// The simulated time and event number of the record being processed on this thread, for
    /// log lines the core emits through `tracing` (see [`SimTime`]).
    static STAMP: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Sets the stamp later log lines of this thread carry.
pub fn set_stamp(t: u64, e: u64) {
    STAMP.set((t, e));
}

/// A `tracing-subscriber` timer that prints the simulated stamp `[t=<sim µs> e=<n>]` instead of
/// the wall clock, so a seed gives byte-identical logs.
pub struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> fmt::Result {
        let (t, e) = STAMP.get();
        write!(w, "[t={t} e={e}]")
    }
}

/// Hash, tail ring and optional full trace (kept, or printed as it happens).
pub struct Trace {
    hash: TraceHash,
    ring: Vec<TraceRecord>,
    next: usize,
    full: Option<Vec<TraceRecord>>,
    live: bool,
}

impl Trace {
    /// A trace that keeps every record when `keep_all`.
    pub fn new(keep_all: bool) -> Trace {
        Trace {
            hash: TraceHash::default(),
            ring: Vec::with_capacity(RING),
            next: 0,
            full: keep_all.then(Vec::new),
            live: false,
        }
    }

    /// A trace that prints every record to stdout as it happens (interleaved with core logs).
    pub fn live() -> Trace {
        Trace { live: true, ..Trace::new(false) }
    }

    /// Records one line.
    pub fn push(&mut self, record: TraceRecord) {
        hash_record(&mut self.hash, &record);
        if self.ring.len() < RING {
            self.ring.push(record);
        } else {
            self.ring[self.next] = record;
        }
        self.next = (self.next + 1) % RING;
        if let Some(full) = &mut self.full {
            full.push(record);
        }
        if self.live {
            set_stamp(record.t, record.e);
            println!("{record}");
        }
    }

    /// The trace hash so far.
    pub fn hash(&self) -> TraceHash {
        self.hash
    }

    /// The last records, oldest first.
    pub fn tail(&self) -> Vec<TraceRecord> {
        if self.ring.len() < RING {
            return self.ring.clone();
        }
        self.ring[self.next..].iter().chain(&self.ring[..self.next]).copied().collect()
    }

    /// Every record (if kept).
    pub fn take_full(&mut self) -> Vec<TraceRecord> {
        self.full.take().unwrap_or_default()
    }
}

fn file_word(file: &FileId) -> [u64; 2] {
    match file {
        FileId::WalSegment { first_seq } => [1, *first_seq],
        FileId::WalCheckpoint => [2, 0],
        FileId::PartitionSegment { key, base } => [
            4 | (u64::from(key.partition) << 8),
            key.topic.0 ^ base.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ],
        FileId::PartitionSeal { key, base } => [
            7 | (u64::from(key.partition) << 8),
            key.topic.0 ^ base.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ],
        FileId::MetaRaftLog => [5, 0],
        FileId::MetaSnapshot => [6, 0],
        FileId::ConsumerJournal { number } => [8, *number],
    }
}

fn key_word(key: &PartitionKey) -> u64 {
    key.topic.0 << 16 | u64::from(key.partition)
}

fn hash_record(h: &mut TraceHash, r: &TraceRecord) {
    h.words(&[r.t, r.e, u64::from(r.node)]);
    match r.what {
        What::DiskIssue { token, kind, file, offset, len, at } => {
            h.words(&[1, token, kind as u64, offset, len, at]);
            h.words(&file_word(&file));
        }
        What::DiskDone { token, kind, file, result } => {
            h.words(&[2, token, kind as u64, result as u64]);
            h.words(&file_word(&file));
        }
        What::Timer => h.word(3),
        What::Request { request, op, .. } => {
            h.words(&[4, request]);
            h.bytes(op.as_bytes());
        }
        What::Refused { client } => h.words(&[5, u64::from(client)]),
        What::Reply { request, status, count } => h.words(&[6, request, u64::from(status), count]),
        What::Timeout { request } => h.words(&[7, request]),
        What::Committed { key, first, count } => h.words(&[8, key_word(&key), first, count]),
        What::Checkpoint { checkpoint } => h.words(&[9, checkpoint]),
        What::Discarded { seq, topic } => h.words(&[10, seq, topic]),
        What::RecordsLost { first, count } => h.words(&[23, first, count]),
        What::Latched => h.word(11),
        What::CommitFailed { key } => h.words(&[12, key_word(&key)]),
        What::SegmentDeleted { key, log_start, records } => {
            h.words(&[24, key_word(&key), log_start, records]);
        }
        What::Fault { action } => {
            h.word(13);
            h.bytes(action.as_bytes());
        }
        What::Started { ok } => h.words(&[14, u64::from(ok)]),
        What::Phase { name } => {
            h.word(15);
            h.bytes(name.as_bytes());
        }
        What::Send { to, tag, len, fate } => {
            h.words(&[16, u64::from(to), u64::from(tag), len, u64::from(fate)]);
        }
        What::Deliver { from, tag, len, ok } => {
            h.words(&[17, u64::from(from), u64::from(tag), len, u64::from(ok)]);
        }
        What::Leader => h.word(18),
        What::Unreachable { to } => h.words(&[19, u64::from(to)]),
    }
}

/// Name of a peer message type tag (see `narad_core::peer`).
fn tag_name(tag: u8) -> &'static str {
    const NAMES: [&str; 12] = [
        "?",
        "raft",
        "commit",
        "commit-reply",
        "confirm-gone",
        "confirm-gone-reply",
        "propose",
        "propose-reply",
        "consume",
        "consume-reply",
        "topic-stats",
        "topic-stats-reply",
    ];
    NAMES.get(usize::from(tag)).copied().unwrap_or("?")
}

impl fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[t={} e={}] n{} ", self.t, self.e, self.node)?;
        match self.what {
            What::DiskIssue { token, kind, file, offset, len, at } => write!(
                f,
                "disk issue #{token} {kind:?} {} off={offset} len={len} latency={at}us",
                file.relative_path()
            ),
            What::DiskDone { token, kind, file, result } => {
                let result = match result {
                    DoneCode::Ok => "ok",
                    DoneCode::NoSpace => "ERR ENOSPC",
                    DoneCode::Io => "ERR EIO",
                };
                write!(f, "disk done  #{token} {kind:?} {} {result}", file.relative_path())
            }
            What::Timer => write!(f, "timer"),
            What::Request { request, op, topic } => write!(f, "request r{request} {op} {topic}"),
            What::Refused { client } => write!(f, "client c{client} refused: node down"),
            What::Reply { request, status, count } => {
                write!(f, "reply r{request} {status} n={count}")
            }
            What::Timeout { request } => write!(f, "timeout r{request} (ambiguous)"),
            What::Committed { key, first, count } => write!(f, "committed {key} @{first} +{count}"),
            What::Checkpoint { checkpoint } => write!(f, "checkpoint durable {checkpoint}"),
            What::Discarded { seq, topic } => write!(f, "discarded seq {seq} of topic#{topic}"),
            What::RecordsLost { first, count } => {
                write!(f, "LOST {count} WAL record(s) damaged at rest from seq {first}")
            }
            What::Latched => write!(f, "WAL LATCHED"),
            What::CommitFailed { key } => write!(f, "commit failed {key}"),
            What::SegmentDeleted { key, log_start, records } => {
                write!(f, "segment deleted {key}: {records} records, log starts at {log_start}")
            }
            What::Fault { action } => write!(f, "FAULT {action}"),
            What::Started { ok } => {
                write!(f, "process start: {}", if ok { "recovered" } else { "REFUSED" })
            }
            What::Phase { name } => write!(f, "phase {name}"),
            What::Send { to, tag, len, fate } => {
                let fate = match fate {
                    0 => "LOST",
                    1 => "sent",
                    2 => "sent TWICE",
                    3 => "HELD (clog)",
                    _ => "UNREACHABLE",
                };
                write!(f, "-> n{to} {} {len}B {fate}", tag_name(tag))
            }
            What::Deliver { from, tag, len, ok } => {
                let what = if ok { "delivered" } else { "LOST on arrival" };
                write!(f, "<- n{from} {} {len}B {what}", tag_name(tag))
            }
            What::Leader => write!(f, "is the metastore leader"),
            What::Unreachable { to } => write!(f, "transport: n{to} unreachable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_records_in_order() {
        let mut trace = Trace::new(false);
        for e in 0..100 {
            trace.push(TraceRecord { t: e, e, node: 0, what: What::Timer });
        }
        let tail = trace.tail();
        assert_eq!(tail.len(), RING);
        assert_eq!(tail.first().map(|r| r.e), Some(60));
        assert_eq!(tail.last().map(|r| r.e), Some(99));
        assert!(tail[0].to_string().starts_with("[t=60 e=60] n0 timer"));
    }
}
