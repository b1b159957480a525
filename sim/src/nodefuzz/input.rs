//! What one fuzz input decodes into: a few start-up choices and a sequence of [`Op`]s against
//! one node. Every field is a *selector* (small integers, edge-value picks), not a final value:
//! `values.rs` turns them into client requests and peer messages within the run's budget, so
//! that most byte strings decode into something the node takes seriously.

use arbitrary::{Arbitrary, Unstructured};

use super::MAX_OPS;

/// One decoded fuzz input.
#[derive(Arbitrary, Clone, Debug, Default)]
pub struct FuzzInput {
    /// How the run starts (fresh disk, or a node already serving some topics).
    pub setup: Setup,
    /// Small limits: a 512 B partition index interval (production 64 KiB) and a metastore
    /// snapshot (with a Raft log reset) every 8 entries (production 1,024).
    pub small_index: bool,
    /// The WAL's two lanes with tiny bounds: a request past 128 B is bulk and each group commit
    /// takes one bulk request (production: 64 KiB and 1 MiB). Bit 1 of `small_index`'s byte,
    /// whose other bits were unused, so inputs kept from before decode as they did otherwise.
    pub small_lanes: bool,
    /// With `small_lanes`, a group bulk bound of 2 KiB instead of 1 B: bulk requests are cut
    /// into chunks of up to 512 B, and a group takes four of them while no small request is
    /// about, so several chunks of one request share a group commit. Bit 2 of the same byte
    /// (inputs kept from before decode as they did).
    pub grouped_chunks: bool,
    /// A produce quota of 2 KiB/s (`core/src/quota.rs`): produces past it are refused 429 and
    /// never staged. Bit 3 of the same byte (inputs kept from before decode as they did).
    pub produce_quota: bool,
    /// Recovery scans partition logs in chunks of 64 × the low 15 bits bytes (0 = each file
    /// whole); the top bit turns the dispatch linger on (`FuzzInput::dispatch_linger`). One
    /// field for both, so inputs kept from before the linger existed decode as they did.
    pub scan_chunk: u16,
    /// After the heal and final read: cut the power once more, recover, read everything again.
    pub final_power_loss: bool,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

impl FuzzInput {
    /// Decodes `data`: the header, then operations until the bytes (or `MAX_OPS`) run out. A
    /// truncated last operation is dropped, so every prefix of an input is an input too.
    pub fn decode(data: &[u8]) -> FuzzInput {
        let mut u = Unstructured::new(data);
        let setup = Setup::arbitrary(&mut u).unwrap_or_default();
        let limits = u8::arbitrary(&mut u).unwrap_or_default();
        let mut input = FuzzInput {
            setup,
            small_index: limits & 1 == 1,
            small_lanes: limits & 2 != 0,
            grouped_chunks: limits & 4 != 0,
            produce_quota: limits & 8 != 0,
            scan_chunk: u16::arbitrary(&mut u).unwrap_or_default(),
            final_power_loss: bool::arbitrary(&mut u).unwrap_or_default(),
            ops: Vec::new(),
        };
        while !u.is_empty() && input.ops.len() < MAX_OPS {
            match Op::arbitrary(&mut u) {
                Ok(op) => input.ops.push(op),
                Err(_) => break,
            }
        }
        input
    }

    /// Bytes per chunk of the partition-log recovery scan (`usize::MAX`: each file whole).
    pub fn scan_chunk_bytes(&self) -> usize {
        match self.scan_chunk & 0x7fff {
            0 => usize::MAX,
            n => usize::from(n) * 64,
        }
    }

    /// `Config::dispatch_linger`: small dispatch batches wait for company (production's
    /// default), or go as soon as their destination is free.
    pub fn dispatch_linger(&self) -> bool {
        self.scan_chunk & 0x8000 != 0
    }
}

/// The state the node is in before the first operation.
#[derive(Arbitrary, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Setup {
    /// Serving, with topics `t0` (1 partition) and `t1` (3 partitions).
    #[default]
    ReadyWithTopics,
    /// Serving (leader, ready), no topic.
    Ready,
    /// Just recovered from an empty disk: its first effects are not completed.
    Fresh,
}

/// One step of a run. Decoded from a one-byte tag with weights (see `Arbitrary for Op`), so
/// requests and completions are common and crashes rarer than one operation in ten.
#[derive(Clone, Debug)]
pub enum Op {
    /// A client request.
    Client(ClientCmd),
    /// A message from the fake peer.
    Peer(PeerCmd),
    /// The head operation of one file's queue completes (`pick` chooses among busy files).
    Complete { pick: u8 },
    /// The head operation of one file's queue fails with `error`.
    Fail { pick: u8, error: Fault },
    /// Every queued operation completes, oldest first, including those they cause.
    CompleteAll,
    /// Time passes; timers that fall due fire in order.
    Advance { time: Span },
    /// Complete everything and let one simulated second pass (ticks, group commits, dispatch).
    Settle,
    /// The process dies: first `land` picks heads that reached the disk without the node
    /// learning it; then the node is rebuilt from what the disk holds.
    Crash { kind: CrashKind, land: Vec<u8> },
    /// `Input::BeginShutdown`.
    Shutdown,
    /// `Input::PeerUnreachable` for the fake peer.
    PeerUnreachable,
}

impl<'a> Arbitrary<'a> for Op {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u8::arbitrary(u)? {
            0..=69 => Op::Client(ClientCmd::arbitrary(u)?),
            70..=109 => Op::Peer(PeerCmd::arbitrary(u)?),
            110..=169 => Op::Complete { pick: u8::arbitrary(u)? },
            170..=184 => Op::Fail { pick: u8::arbitrary(u)?, error: Fault::arbitrary(u)? },
            185..=204 => Op::CompleteAll,
            205..=224 => Op::Advance { time: Span::arbitrary(u)? },
            225..=234 => Op::Settle,
            235..=246 => Op::Crash { kind: CrashKind::arbitrary(u)?, land: Vec::arbitrary(u)? },
            247..=249 => Op::Shutdown,
            _ => Op::PeerUnreachable,
        })
    }
}

/// The error an injected failure reports.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Io,
    NoSpace,
}

/// How a crash treats what was not synced.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashKind {
    /// `kill -9`: the page cache survives (every completed write, synced or not).
    Process,
    /// Power loss: only synced bytes survive.
    PowerLoss,
    /// Power loss that keeps a sector-aligned prefix of unsynced writes (torn tails).
    PowerLossTorn,
}

/// An amount of simulated time.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Span {
    /// Up to 65 ms, in microseconds.
    Micros(u16),
    /// Up to 2.55 s, in 10 ms steps.
    Centis(u8),
    /// Up to 63.75 s, in 250 ms steps (commit timeouts, backoffs).
    QuarterSeconds(u8),
}

/// A client request, as selectors (weighted towards produce and consume).
#[derive(Clone, Debug)]
pub enum ClientCmd {
    Create {
        topic: TopicSel,
        partitions: Count,
        retention: Option<u32>,
    },
    Delete {
        topic: TopicSel,
    },
    /// A page of the topic list, 0..12: see `values.rs`.
    List {
        page: u8,
    },
    Get {
        topic: TopicSel,
    },
    Produce {
        topic: TopicSel,
        messages: Vec<MessageSpec>,
        batch: bool,
    },
    /// A batch of `count` one-byte messages (around the 1,000-message limit).
    ProduceMany {
        topic: TopicSel,
        count: u16,
    },
    Consume {
        topic: TopicSel,
        partition: u8,
        offset: Offset,
        max: u16,
    },
    Members,
}

impl<'a> Arbitrary<'a> for ClientCmd {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let selector = u8::arbitrary(u)?;
        Ok(match selector {
            0..=99 => ClientCmd::Produce {
                topic: TopicSel::arbitrary(u)?,
                messages: Vec::arbitrary(u)?,
                batch: bool::arbitrary(u)?,
            },
            100..=111 => {
                ClientCmd::ProduceMany { topic: TopicSel::arbitrary(u)?, count: u16::arbitrary(u)? }
            }
            112..=139 => ClientCmd::Create {
                topic: TopicSel::arbitrary(u)?,
                partitions: Count::arbitrary(u)?,
                retention: Option::arbitrary(u)?,
            },
            140..=155 => ClientCmd::Delete { topic: TopicSel::arbitrary(u)? },
            156..=209 => ClientCmd::Consume {
                topic: TopicSel::arbitrary(u)?,
                partition: u8::arbitrary(u)?,
                offset: Offset::arbitrary(u)?,
                max: u16::arbitrary(u)?,
            },
            210..=221 => ClientCmd::List { page: selector - 210 },
            222..=239 => ClientCmd::Get { topic: TopicSel::arbitrary(u)? },
            // 240..=249 chose a stats request until the core dropped it (runtimes read
            // `Node::stats` directly); it consumed no further bytes, like `Members`, so saved
            // inputs keep the layout of everything after it.
            _ => ClientCmd::Members,
        })
    }
}

/// A topic name: the common ones, or an edge case of the name rules.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct TopicSel(pub u8);

/// A partition count: small, an edge of the 1–4096 range, or raw.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Count {
    Default,
    Small(u8),
    Edge(u8),
}

/// One message of a produce.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct MessageSpec {
    pub key: KeySel,
    /// An explicit partition (may be out of range).
    pub partition: Option<u8>,
    pub size: Size,
}

/// A record key.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum KeySel {
    None,
    /// One of a few short keys (partition affinity).
    Small(u8),
    /// Empty, or around the 4 KiB limit.
    Edge(u8),
}

/// A payload size: tiny (< 256 B), medium (< 8 KiB), or an edge of the 1 B – 1 MiB range (or,
/// for a peer's records, of the 2 MiB frame limit).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Size {
    Tiny(u8),
    Medium(u16),
    Edge(u8),
}

/// A read offset.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Offset {
    Small(u8),
    Raw(u64),
    Edge(u8),
}

/// A message from the fake peer (node 2, or another id the cluster does not know).
#[derive(Arbitrary, Clone, Debug)]
pub struct PeerCmd {
    pub from: u8,
    pub message: PeerSel,
}

/// The message itself: raw bytes, or a well-formed `PeerMessage`.
#[derive(Arbitrary, Clone, Debug)]
pub enum PeerSel {
    /// Any bytes at all.
    Raw(Vec<u8>),
    /// The right protocol version and a chosen tag, then any bytes.
    Tagged {
        tag: u8,
        body: Vec<u8>,
    },
    CommitBatch {
        id: u64,
        checkpoint: Offset,
        target: Target,
        records: Vec<RecordSpec>,
    },
    CommitReply {
        id: u64,
        result: u8,
        offset: u64,
    },
    ConfirmGone {
        id: u64,
        topic: TopicIdSel,
    },
    ConfirmGoneReply {
        id: u64,
        topic: TopicIdSel,
        gone: bool,
    },
    /// A forwarded metastore command: a topic create or delete, or raw command bytes.
    Propose {
        id: u64,
        command: CommandSel,
    },
    ProposeReply {
        id: u64,
        ok: bool,
    },
    Consume {
        id: u64,
        target: Target,
        offset: Offset,
        max: u32,
    },
    ConsumeReply {
        id: u64,
        ok: bool,
    },
    TopicStats {
        id: u64,
        topic: TopicIdSel,
    },
    TopicStatsReply {
        id: u64,
        /// (partition, [log start, high watermark, segments, size in bytes]).
        partitions: Vec<(u32, [u64; 4])>,
    },
    /// A Raft message: raw protobuf bytes.
    Raft(Vec<u8>),
    /// A well-formed Raft message (raft-rs protobuf) addressed from the sender to our node.
    RaftMessage(RaftSel),
}

/// A Raft message's fields: small numbers, near the terms and indexes a young log has.
#[derive(Arbitrary, Clone, Debug)]
pub struct RaftSel {
    /// `eraftpb::MessageType` (0–18; others are unknown values).
    pub msg_type: u8,
    pub term: u8,
    pub log_term: u8,
    pub index: u8,
    pub commit: u8,
    pub reject: bool,
    /// Entries appended after `index`, each with its term and metastore command.
    pub entries: Vec<(u8, CommandSel)>,
}

/// A partition on the wire.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Target {
    pub topic: TopicIdSel,
    pub partition: u8,
}

/// A topic incarnation id: one the node has shown us, or any id.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum TopicIdSel {
    Known(u8),
    Raw(u64),
}

/// One record of a peer's commit batch.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct RecordSpec {
    pub seq: Offset,
    pub timestamp_ms: u64,
    pub key: KeySel,
    pub size: Size,
}

/// A forwarded metastore command.
#[derive(Arbitrary, Clone, Debug)]
pub enum CommandSel {
    Create { topic: TopicSel, partitions: Count },
    Delete { topic: TopicSel, id: TopicIdSel },
    Raw(Vec<u8>),
}
