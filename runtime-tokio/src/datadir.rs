//! The data directory at start-up: take an exclusive lock on it (two processes writing the same
//! WAL would destroy it), then read every file the node owns so `Node::begin_recovery` can
//! rebuild its state: the small ones whole (seal files included), the partition logs (which may
//! be larger than memory) a chunk at a time through the core's `PartitionScan`, and only those
//! segments whose seal file the core does not trust: an adopted segment is never opened, only its
//! length is looked up. Files the core does not recognise are left alone.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bytes::Bytes;
use narad_core::{FileId, PartitionKey, PartitionLog, PartitionScan, Recovery, RecoveryError};

use crate::disk::create_dirs_durable;

/// Name of the lock file in the data directory (not a `FileId`, so recovery ignores it).
const LOCK_FILE: &str = "LOCK";

/// Holds the data directory's exclusive lock until dropped (or the process exits).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Creates the data directory if needed and locks it against a second `narad` process.
pub fn lock(data_dir: &Path) -> anyhow::Result<DataDirLock> {
    create_dirs_durable(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    let path = data_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(DataDirLock { _file: file }),
        Err(TryLockError::WouldBlock) => {
            bail!("data directory {} is in use by another narad process", data_dir.display())
        }
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// What start-up found in the data directory.
#[derive(Debug, Default)]
pub struct Found {
    /// Every recognised file but the partition logs, read whole (they are small: the WAL is
    /// compacted behind its checkpoint, the metastore behind its snapshot, a seal file is about
    /// 16 KiB per 64 MiB segment).
    pub files: BTreeMap<FileId, Bytes>,
    /// The partition logs' segment files (first offset, where), which may be far larger than
    /// memory: scanned by `recover_partitions`.
    pub partition_logs: BTreeMap<PartitionKey, Vec<(u64, Segment)>>,
}

/// Where a partition segment's bytes are: a file, or memory (the simulator's disk).
#[derive(Clone, Debug)]
pub enum Segment {
    File(PathBuf),
    Memory(Bytes),
}

impl Segment {
    fn name(&self, base: u64) -> String {
        match self {
            Segment::File(path) => path.display().to_string(),
            Segment::Memory(_) => format!("segment {base} (in memory)"),
        }
    }
}

impl Found {
    /// What start-up finds in a snapshot of every file (the simulator's disk): the same split
    /// `load` makes of a directory.
    pub fn from_files(files: BTreeMap<FileId, Bytes>) -> Found {
        let mut found = Found::default();
        for (file, bytes) in files {
            match file {
                FileId::PartitionSegment { key, base } => {
                    found
                        .partition_logs
                        .entry(key)
                        .or_default()
                        .push((base, Segment::Memory(bytes)));
                }
                other => drop(found.files.insert(other, bytes)),
            }
        }
        found
    }

    /// Bytes read whole (for the start-up log line).
    pub fn bytes(&self) -> usize {
        self.files.values().map(Bytes::len).sum()
    }
}

/// Finds every file below `data_dir` that `FileId::parse` recognises, after making every
/// directory entry durable (the core's contract: the files it is handed must not vanish on a
/// power loss; it syncs their contents itself before trusting them).
pub fn load(data_dir: &Path) -> anyhow::Result<Found> {
    let mut found = Found::default();
    walk(data_dir, "", &mut found)?;
    // Directory listings come in any order; recovery takes a log's segments oldest first.
    for segments in found.partition_logs.values_mut() {
        segments.sort_unstable_by_key(|(base, _)| *base);
    }
    Ok(found)
}

fn walk(dir: &Path, prefix: &str, found: &mut Found) -> anyhow::Result<()> {
    fs::File::open(dir)
        .and_then(|handle| handle.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))?;
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            tracing::warn!(path = %entry.path().display(), "ignoring non-UTF-8 file name");
            continue;
        };
        let relative = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let kind = entry.file_type().with_context(|| format!("stat {relative}"))?;
        if kind.is_dir() {
            walk(&entry.path(), &relative, found)?;
        } else if let Some(FileId::PartitionSegment { key, base }) = FileId::parse(&relative) {
            found.partition_logs.entry(key).or_default().push((base, Segment::File(entry.path())));
        } else if let Some(file) = FileId::parse(&relative) {
            let bytes = fs::read(entry.path())
                .with_context(|| format!("reading {}", entry.path().display()))?;
            found.files.insert(file, Bytes::from(bytes));
        } else if relative != LOCK_FILE {
            tracing::debug!(path = relative, "ignoring unrecognised file in the data directory");
        }
    }
    Ok(())
}

/// Bytes of partition log read and checked at a time during recovery.
const SCAN_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// What recovering the partition logs cost (for the start-up log line and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCount {
    /// Segments adopted from their seal files (not read).
    pub adopted: u64,
    /// Segments read and checked.
    pub scanned: u64,
    /// Bytes of segment files read.
    pub bytes_read: u64,
}

/// Recovers every partition log a chunk at a time (`PartitionScan`), so that memory holds one
/// chunk and each log's sparse index, however large the logs are; segments with a trusted seal
/// file are adopted without a read. The outer error is I/O; the inner one is damage recovery
/// refuses to repair.
pub fn recover_partitions(
    recovery: &mut Recovery,
    logs: &BTreeMap<PartitionKey, Vec<(u64, Segment)>>,
) -> anyhow::Result<Result<(Vec<PartitionLog>, ScanCount), RecoveryError>> {
    scan_in_chunks(recovery, logs, SCAN_CHUNK_BYTES)
}

fn scan_in_chunks(
    recovery: &mut Recovery,
    logs: &BTreeMap<PartitionKey, Vec<(u64, Segment)>>,
    chunk_bytes: usize,
) -> anyhow::Result<Result<(Vec<PartitionLog>, ScanCount), RecoveryError>> {
    let mut recovered = Vec::with_capacity(logs.len());
    let mut chunk = vec![0u8; chunk_bytes];
    let mut count = ScanCount::default();
    for (key, segments) in logs {
        let mut scan = recovery.partition_scan(*key);
        let mut rest = Vec::new();
        for (base, segment) in segments {
            rest.clear();
            match open_segment(&mut scan, *base, segment, &mut chunk, &mut rest)? {
                Ok(read) => count.bytes_read += read,
                Err(damage) => return Ok(Err(damage)),
            }
        }
        count.adopted += scan.adopted();
        count.scanned += scan.scanned();
        match scan.finish(&rest) {
            Ok(log) => recovered.push(log),
            Err(damage) => return Ok(Err(damage)),
        }
    }
    Ok(Ok((recovered, count)))
}

/// Opens one segment: adopted from its seal (only its length is looked up), or read and fed in
/// chunks, the bytes past a frame that is not intact left in `rest` (a torn tail is at most the
/// commit that was being written). Returns the bytes read.
fn open_segment(
    scan: &mut PartitionScan,
    base: u64,
    segment: &Segment,
    chunk: &mut [u8],
    rest: &mut Vec<u8>,
) -> anyhow::Result<Result<u64, RecoveryError>> {
    let read = |e| anyhow::Error::new(e).context(format!("reading {}", segment.name(base)));
    let len = match segment {
        Segment::File(path) => fs::metadata(path).map_err(read)?.len(),
        Segment::Memory(bytes) => bytes.len() as u64,
    };
    match scan.open_segment(base, len) {
        Ok(true) => return Ok(Ok(0)),
        Ok(false) => {}
        // Sealing the segment scanned before refuses it if it ended in a bad frame.
        Err(damage) => return Ok(Err(damage)),
    }
    let mut file: Box<dyn Read> = match segment {
        Segment::File(path) => Box::new(File::open(path).map_err(read)?),
        Segment::Memory(bytes) => Box::new(std::io::Cursor::new(bytes.clone())),
    };
    let mut bytes_read = 0;
    while !scan.stopped() {
        let n = file.read(chunk).map_err(read)?;
        if n == 0 {
            break;
        }
        bytes_read += n as u64;
        if let Err(damage) = scan.feed(&chunk[..n]) {
            return Ok(Err(damage));
        }
    }
    file.read_to_end(rest).map_err(read)?;
    Ok(Ok(bytes_read + rest.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_known_files_and_ignores_others() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        fs::create_dir_all(root.join("wal")).expect("mkdir");
        fs::create_dir_all(root.join("partitions/00000000000000000001")).expect("mkdir");
        fs::write(root.join("wal/00000000000000000000.wal"), b"seg").expect("write");
        fs::write(root.join("wal/checkpoint"), b"cp").expect("write");
        fs::write(root.join("partitions/00000000000000000001/00002.log"), b"p").expect("write");
        fs::write(root.join("wal/stray.tmp"), b"x").expect("write");
        let _lock = lock(root).expect("lock");
        let found = load(root).expect("load");
        let names: Vec<String> = found.files.keys().map(FileId::relative_path).collect();
        assert_eq!(names, ["wal/00000000000000000000.wal", "wal/checkpoint"]);
        assert_eq!(found.files[&FileId::WalCheckpoint], Bytes::from_static(b"cp"));
        let logs: Vec<_> = found.partition_logs.keys().copied().collect();
        let key = PartitionKey { topic: narad_core::TopicId(1), partition: 2 };
        assert_eq!(logs, [key]);
        // One stray byte: a torn tail, truncated by the recovered log's first effects.
        let config = narad_core::Config::single(narad_core::NodeId(1), 7);
        let now = narad_core::Instant(0);
        let mut recovery =
            narad_core::Node::begin_recovery(config, now, BTreeMap::new()).expect("empty");
        let (logs, count) =
            recover_partitions(&mut recovery, &found.partition_logs).expect("io").expect("ok");
        assert_eq!(count, ScanCount { adopted: 0, scanned: 1, bytes_read: 1 });
        assert_eq!((logs[0].high_watermark(), logs[0].size_bytes()), (0, 0));
    }

    #[test]
    fn partition_logs_recover_the_same_in_any_chunk_size() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("00000.log");
        let mut bytes = Vec::new();
        for offset in 0..300u64 {
            let record = narad_core::partition::PartitionRecord {
                offset,
                timestamp_ms: 1,
                origin_node: narad_core::NodeId(1),
                origin_seq: offset,
                key: None,
                payload: Bytes::from(vec![b'x'; 1 + (offset as usize * 13) % 500]),
            };
            record.encode_into(&mut bytes);
        }
        let whole = bytes.len() as u64;
        bytes.extend_from_slice(&[1, 2, 3]); // a torn tail: truncated back to `whole`
        fs::write(&path, &bytes).expect("write");
        let key = PartitionKey { topic: narad_core::TopicId(1), partition: 0 };
        let config = narad_core::Config::single(narad_core::NodeId(1), 7);
        let now = narad_core::Instant(0);
        for chunk in [1, 7, 4096, 1 << 20] {
            let mut recovery =
                narad_core::Node::begin_recovery(config.clone(), now, BTreeMap::new())
                    .expect("nothing to recover");
            let segments = BTreeMap::from([(key, vec![(0, Segment::File(path.clone()))])]);
            let logs = scan_in_chunks(&mut recovery, &segments, chunk).expect("io");
            let log = &logs.expect("no damage").0[0];
            assert_eq!((log.high_watermark(), log.size_bytes()), (300, whole), "chunk {chunk}");
        }
    }

    /// A segment whose seal file is trusted is adopted from it and never read: here its bytes
    /// are garbage of the right length, and start-up neither reads nor minds them.
    #[test]
    fn a_segment_with_a_trusted_seal_is_not_read() {
        use narad_core::partition::IndexEntry;
        use narad_core::partition::seal::Seal;
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let key = PartitionKey { topic: narad_core::TopicId(1), partition: 0 };
        let segment = root.join(FileId::PartitionSegment { key, base: 0 }.relative_path());
        fs::create_dir_all(segment.parent().unwrap()).expect("mkdir");
        fs::write(&segment, vec![0xEE; 5_000]).expect("write");
        let seal = Seal {
            base: 0,
            end: 40,
            size: 5_000,
            newest_ms: 7,
            entries: vec![IndexEntry { offset: 0, pos: 0 }],
            ..Seal::default()
        };
        let seal_path = root.join(FileId::PartitionSeal { key, base: 0 }.relative_path());
        fs::write(&seal_path, seal.encode()).expect("write seal");
        let _lock = lock(root).expect("lock");
        let found = load(root).expect("load");
        assert!(found.files.contains_key(&FileId::PartitionSeal { key, base: 0 }), "read whole");
        let config = narad_core::Config::single(narad_core::NodeId(1), 7);
        let mut recovery =
            narad_core::Node::begin_recovery(config, narad_core::Instant(0), found.files)
                .expect("nothing else to recover");
        let (logs, count) =
            recover_partitions(&mut recovery, &found.partition_logs).expect("io").expect("ok");
        assert_eq!(count, ScanCount { adopted: 1, scanned: 0, bytes_read: 0 });
        assert_eq!((logs[0].high_watermark(), logs[0].size_bytes()), (40, 5_000));
    }

    #[test]
    fn second_lock_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = lock(dir.path()).expect("first lock");
        let err = lock(dir.path()).expect_err("second lock must fail");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        lock(dir.path()).expect("lock again after release");
    }
}
