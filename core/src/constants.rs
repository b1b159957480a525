//! Every tuning constant of docs/design.md §6, named and in one place, so they are grep-able and a
//! reviewer can see the whole performance envelope at once.

/// A WAL segment is sealed once it grows past this size (the default of `Config::wal_segment_bytes`;
/// a group commit always lands whole, so this never limits a record).
pub const WAL_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// The largest WAL sequence number recovery accepts (2^62). A node assigning a million sequence
/// numbers a second would take 146,000 years to reach it, so anything larger on disk is damage;
/// bounding it keeps every `sequence + window` sum in the dispatcher far from overflow.
pub const MAX_WAL_SEQ: u64 = 1 << 62;
/// A fully dispatched active segment past this size is rotated so it can be deleted (the default
/// of `Config::wal_rotate_dispatched_bytes`).
pub const WAL_ROTATE_DISPATCHED_BYTES: u64 = 1024 * 1024;
/// Zeros the WAL writes and syncs past its active segment's end at a time, when idle
/// (`core/src/wal/prewrite.rs`; the default of `Config::wal_prewrite_chunk_bytes`, 0 turns it
/// off). A group commit that overwrites pre-written, synced blocks costs its fdatasync less than
/// one that appends: no size or extent change must be committed.
pub const WAL_PREWRITE_CHUNK_BYTES: u64 = 256 * 1024;
/// A produce whose records take more than this is bulk: it joins a group commit after every
/// small one staged with it (`core/src/wal/staging.rs`; the default of
/// `Config::wal_small_request_bytes`).
pub const WAL_SMALL_REQUEST_BYTES: u64 = 64 * 1024;
/// A group commit takes bulk produces while their bytes are below this, at least one piece, when
/// no small produce is about; a bulk produce larger than a quarter of this is written in chunks
/// of at most that size (256 KiB), and while small produces are about a group takes one chunk,
/// with small groups between them (`core/src/wal/staging.rs`; `Config::wal_group_bulk_bytes`):
/// a small produce waits behind about 1 ms of bulk writing at about 300 MB/s, not a 16 MiB batch.
pub const WAL_GROUP_BULK_BYTES: u64 = 1024 * 1024;
/// Longest a lone producer's partition work waits for the next WAL group commit, so that both
/// fsyncs reach the device together (`core/src/node/flush_pairing.rs`; the default of
/// `Config::flush_pairing_us`, 0 turns it off).
pub const FLUSH_PAIRING_US: u64 = 1_000;
/// Lower bound of the dispatch window (records held at once).
pub const WINDOW_BASE_RECORDS: usize = 4_096;
/// Upper bound of the dispatch window.
pub const WINDOW_MAX_RECORDS: usize = 65_536;
/// Records per destination the window is sized for: one commit (one fsync) per batch.
pub const BATCH_TARGET_RECORDS: usize = 64;
/// A destination below its batch target may wait this long for company at least, whatever its
/// recent commit latency (`Config::dispatch_linger`).
pub const LINGER_FLOOR_MS: u64 = 2;
/// The longest a small batch may linger waiting for company.
pub const LINGER_CAP_MS: u64 = 50;
/// A partition log's in-memory index keeps one entry per this many bytes of log (not one per
/// record): a consume reads at most this much before the records it returns.
pub const PARTITION_INDEX_INTERVAL_BYTES: u64 = 64 * 1024;
/// A partition log's active segment is sealed once it holds this many bytes (the next commit
/// starts a new segment file): the unit retention deletes.
pub const PARTITION_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// The retention pass runs this often (the default of `Config::retention_check_ms`): a segment
/// past its topic's retention is deleted at most this much later. The pass only compares numbers
/// held in memory; deletions run one segment at a time, off the produce path.
pub const RETENTION_CHECK_MS: u64 = 1_000;
/// An active segment holding records rolls once it is older than its topic's `retention_ms`
/// divided by this (and at least `SEGMENT_ROLL_MIN_AGE_MS`), so that time retention acts on a
/// quiet partition too: a record outlives its retention by at most about an eighth of it (plus
/// a pass). Small segments: at most about eight per partition live beyond the size bound.
pub const SEGMENT_ROLL_AGE_DIVISOR: u64 = 8;
/// The youngest an active segment rolls by age.
pub const SEGMENT_ROLL_MIN_AGE_MS: u64 = 1_000;
/// Byte budget of one commit batch (at least one record is always sent): one partition write,
/// fsync and read-back, and at most one node RPC. Kept small because every WAL fsync is a device
/// flush that waits behind the partition writes given to the device before it: beside a flood of
/// 16 MiB batches, 1 MiB commits (8 MiB before) took a small produce's p99 from 29–32 to 22–26 ms
/// (docs/design.md §7).
pub const COMMIT_BATCH_BYTES: usize = 1024 * 1024;
/// Reading never goes further than this many windows past the checkpoint.
pub const LOOKAHEAD_WINDOWS: usize = 16;
/// A destination whose commits failed this many passes in a row is rerouted.
pub const REROUTE_AFTER_FAILED_PASSES: u32 = 3;
/// A commit that has not answered after this long is treated as failed.
pub const COMMIT_TIMEOUT_MS: u64 = 30_000;
/// A failing destination is retried after this long.
pub const FAILURE_BACKOFF_MS: u64 = 1_000;
/// A WAL read for dispatch whose bytes hold no valid record is read again after this long (a
/// transient flip on the way clears at once; damage at rest is declared after ten such reads, so
/// one damaged record holds dispatch back for about 100 ms, not ten back-offs).
pub const DAMAGED_REREAD_MS: u64 = 10;
/// At most this many commits are in flight at once.
pub const COMMIT_FANOUT: usize = 16;
/// A dirty checkpoint is made durable within this long.
pub const CHECKPOINT_SYNC_DELAY_MS: u64 = 250;
/// The metastore takes a snapshot (and resets its Raft log) after this many applied entries.
pub const META_SNAPSHOT_EVERY_ENTRIES: u64 = 1_024;
/// How far ahead of its produce quota a payer may run (`quota.rs`): a burst of this long at the
/// quota's rate passes at once, on top of the rate itself.
pub const QUOTA_BURST_MS: u64 = 1_000;
/// Largest payload of one message.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Most messages in one batch produce.
pub const MAX_BATCH_MESSAGES: usize = 1_000;
/// Largest body of one batch produce.
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Default partition count of a new topic.
pub const DEFAULT_PARTITIONS: u32 = 3;
/// Most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 4_096;
/// Largest `retention_ms` a topic may have: 2^53 - 1, the largest integer every JSON client
/// represents exactly (about 285,000 years). Encodings reserve `u64::MAX` for "none".
pub const MAX_RETENTION_MS: u64 = (1 << 53) - 1;
/// The `retention_ms` in force for a topic that was never given one: 7 days. A topic stores no
/// value then (the default of the build applies, as shown by the API); `0` keeps records forever.
pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 60 * 60 * 1_000;
/// Smallest non-zero `retention_ms` a create or update may ask for: 1 s. Anything shorter would
/// expire records before a consumer could read them; sub-second values are typos of seconds.
pub const MIN_RETENTION_MS: u64 = 1_000;
/// Smallest `retention_bytes` (per partition) a create or update may ask for: 4 MiB, twice the
/// largest partition frame (a 1 MiB payload with its key and envelope fits a 2 MiB frame). A
/// smaller budget could not hold a partition's newest large record with room for the one before,
/// so it is refused as a misconfiguration rather than honoured by trimming everything.
pub const MIN_RETENTION_BYTES: u64 = 4 * 1024 * 1024;
/// Largest `retention_bytes`: 2^53 - 1, like `MAX_RETENTION_MS` (exact in every JSON client;
/// encodings reserve `u64::MAX` for "none").
pub const MAX_RETENTION_BYTES: u64 = (1 << 53) - 1;
/// Longest topic name.
pub const MAX_TOPIC_NAME_BYTES: usize = 200;
/// Longest user name (docs/design.md §8).
pub const MAX_USER_NAME_BYTES: usize = 64;
/// Most grants one user holds (each request is checked against all of them).
pub const MAX_GRANTS_PER_USER: usize = 64;
/// Most users the metastore holds (every replica keeps them all in memory and in each snapshot).
pub const MAX_USERS: usize = 10_000;
/// Most records one consume returns.
pub const MAX_CONSUME_RECORDS: u32 = 1_000;
/// Most payload bytes one consume reads (at least one record is always returned).
pub const MAX_CONSUME_BYTES: u64 = 8 * 1024 * 1024;
/// Size of one read the dispatcher issues against a WAL segment: larger than the largest frame
/// (1 MiB payload + key + envelope), so every read holds at least one whole record.
pub const WAL_READ_CHUNK_BYTES: u64 = 4 * 1024 * 1024;
/// Longest record key.
pub const MAX_KEY_BYTES: usize = 4_096;

/// Queue consume: offsets past a partition's ack frontier that may be leased (and so acked
/// ahead of it) at once; past it, receives wait for the frontier to move (the original Narad's
/// `max_acked_ahead_per_partition` is 1,024).
pub const QUEUE_WINDOW_RECORDS: u64 = 4_096;
/// Default lease of a queue receive, when a topic sets none (`visibility_timeout_ms`).
pub const DEFAULT_VISIBILITY_TIMEOUT_MS: u64 = 30_000;
/// Messages a queue receive may ask for at once (`max`).
pub const MAX_RECEIVE_MESSAGES: u32 = 100;
/// Topics a page of `GET /v1/topics` covers when the client gives no `limit`.
pub const TOPIC_PAGE_DEFAULT: u32 = 100;
/// The most topics one page covers; a larger `limit` is taken as this.
pub const TOPIC_PAGE_MAX: u32 = 1_000;
/// Receipt handles one batch ack may settle.
pub const MAX_SETTLE_HANDLES: usize = 100;
/// Size past which the consumer journal is compacted into a new file.
pub const CONSUMER_JOURNAL_COMPACT_BYTES: u64 = 4 * 1024 * 1024;
/// Longest a consumer-journal group commit smaller than the last one waits for more entries.
pub const CONSUMER_JOURNAL_LINGER_MAX_US: u64 = 1_000;

/// Longest a consume may wait for a record (`wait`, long-poll): longer asks are cut to it and
/// the HTTP answer says so (`X-Narad-Wait-Clamped`). Below every timeout between a client and
/// the node (the CLI waits 60 s; a forwarded consume's deadline is its wait plus 6 s).
pub const MAX_CONSUME_WAIT_MS: u64 = 20_000;
/// Most long-poll consumes parked on one node at once (local clients' and peers' together);
/// past it a consume that would park is answered 503 (retry later). A parked consume holds
/// its request and a few index entries, no timer or task of its own.
pub const PARKED_MAX: usize = 16_384;
