//! Executes the core's `DiskOp`s on real files, off the async reactor.
//!
//! The core's contract (core/src/io.rs): operations on the same file complete in the order they
//! were emitted; different files may run concurrently. We honour it by routing every `FileId` to a
//! fixed thread: the ingress WAL segments have a dedicated thread, so a group commit's write +
//! fdatasync is never queued behind anything but the previous group commit (docs/benchmarks.md),
//! and everything else (the WAL checkpoint, the catalogue, partition logs) is spread over a small
//! pool by a stable hash of the file. Each thread keeps its own cache of open files, so the hot
//! path is one positional syscall per operation. Completions travel back to the driver as
//! `Input::Disk` over an unbounded channel (sending never blocks a disk thread).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread;

use bytes::Bytes;
use narad_core::{DiskDone, DiskError, DiskOp, FileId, Input, IoToken};
use tokio::sync::mpsc::UnboundedSender;

/// Threads serving files other than the WAL.
const POOL_THREADS: usize = 2;
/// Open files cached per thread before one is closed to make room.
const OPEN_FILES_PER_THREAD: usize = 256;
/// Completions a disk thread holds back at most before sending them (see `Worker::run`).
const MAX_HELD_COMPLETIONS: usize = 16;

/// One operation queued on a disk thread.
struct Job {
    token: IoToken,
    op: DiskOp,
}

/// Handle to the disk threads. Dropping it lets each thread finish its queue and exit.
pub struct DiskExecutor {
    wal: mpsc::Sender<Job>,
    /// The WAL thread's state, shared so that the driver may run a WAL operation itself.
    wal_worker: Arc<Mutex<Worker>>,
    /// WAL operations submitted whose completion the driver has not been handed yet.
    wal_pending: HashSet<IoToken>,
    pool: Vec<mpsc::Sender<Job>>,
}

impl DiskExecutor {
    /// Starts the disk threads for files below `data_dir`; completions go to `done`.
    pub fn start(data_dir: &Path, done: UnboundedSender<Input>) -> io::Result<DiskExecutor> {
        let (wal, wal_worker) = spawn_worker("narad-disk-wal".to_string(), data_dir, done.clone())?;
        let pool = (0..POOL_THREADS)
            .map(|i| spawn_worker(format!("narad-disk-{i}"), data_dir, done.clone()))
            .map(|spawned| spawned.map(|(lane, _)| lane))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(DiskExecutor { wal, wal_worker, wal_pending: HashSet::new(), pool })
    }

    /// Queues `op`; its completion arrives later as `Input::Disk { token, .. }`.
    pub fn submit(&mut self, token: IoToken, op: DiskOp) {
        let lane = match op.file() {
            FileId::WalSegment { .. } => {
                self.wal_pending.insert(token);
                &self.wal
            }
            other => &self.pool[pool_index(other, self.pool.len())],
        };
        lane.send(Job { token, op }).expect("invariant: disk threads live as long as the executor");
    }

    /// The driver was handed the completion of `token`.
    pub fn completed(&mut self, token: IoToken) {
        self.wal_pending.remove(&token);
    }

    /// Runs a WAL operation on the calling thread and returns its completion, if no WAL
    /// operation is queued, running or unanswered: the operation is then next in its file's
    /// order either way. Otherwise hands `op` back (submit it). Blocks the caller for the
    /// operation (an fdatasync): the driver does this only when it has nothing else to do, and
    /// saves two thread handoffs on the acknowledgement's path.
    pub fn run_wal_inline(&mut self, token: IoToken, op: DiskOp) -> Result<Input, DiskOp> {
        if !matches!(op.file(), FileId::WalSegment { .. }) || !self.wal_pending.is_empty() {
            return Err(op);
        }
        let Ok(mut worker) = self.wal_worker.try_lock() else {
            return Err(op);
        };
        let result = worker.run_op(&op);
        Ok(Input::Disk { token, result })
    }
}

impl crate::env::DiskBackend for DiskExecutor {
    fn submit(&mut self, token: IoToken, op: DiskOp) {
        DiskExecutor::submit(self, token, op);
    }

    fn completed(&mut self, token: IoToken) {
        DiskExecutor::completed(self, token);
    }

    fn run_wal_inline(&mut self, token: IoToken, op: DiskOp) -> Result<Input, DiskOp> {
        DiskExecutor::run_wal_inline(self, token, op)
    }
}

/// The pool thread that owns `file`: a pure function of the file, so its operations stay ordered.
fn pool_index(file: FileId, threads: usize) -> usize {
    let hash = match file {
        // A partition's seal files on the thread of its segments.
        FileId::PartitionSegment { key, .. } | FileId::PartitionSeal { key, .. } => {
            key.topic.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(key.partition)
        }
        _ => 0,
    };
    usize::try_from(hash % threads as u64).expect("invariant: index below the thread count")
}

type Spawned = (mpsc::Sender<Job>, Arc<Mutex<Worker>>);

fn spawn_worker(
    name: String,
    data_dir: &Path,
    done: UnboundedSender<Input>,
) -> io::Result<Spawned> {
    let (tx, rx) = mpsc::channel();
    let worker = Worker { data_dir: data_dir.to_path_buf(), files: HashMap::new() };
    let worker = Arc::new(Mutex::new(worker));
    let shared = Arc::clone(&worker);
    thread::Builder::new().name(name).spawn(move || run(&shared, &rx, &done))?;
    Ok((tx, worker))
}

/// A disk thread's files and state; locked by the thread for each operation (and by the driver
/// when it runs a WAL operation itself).
struct Worker {
    data_dir: PathBuf,
    files: HashMap<FileId, File>,
}

fn lock(worker: &Mutex<Worker>) -> MutexGuard<'_, Worker> {
    worker.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Executes jobs in arrival order. Completions are held back while the next queued job is for
/// the same file and sent together when the run ends: the core acts only once every operation of
/// a group commit (write, fdatasync) or partition commit (write, fdatasync, read-back) is done,
/// so waking the driver for each one costs context switches and buys nothing. A job for another
/// file, or an empty queue, flushes what is held.
fn run(worker: &Mutex<Worker>, jobs: &mpsc::Receiver<Job>, done: &UnboundedSender<Input>) {
    let mut held: Vec<Input> = Vec::with_capacity(4);
    let mut next = jobs.recv().ok();
    while let Some(Job { token, op }) = next.take() {
        let file = op.file();
        let result = lock(worker).run_op(&op);
        held.push(Input::Disk { token, result });
        next = jobs.try_recv().ok();
        let same_file = next.as_ref().is_some_and(|job| job.op.file() == file);
        if held.len() >= MAX_HELD_COMPLETIONS || !same_file {
            for input in held.drain(..) {
                if done.send(input).is_err() {
                    return; // The driver is gone: nobody waits for completions any more.
                }
            }
        }
        if next.is_none() {
            next = jobs.recv().ok();
        }
    }
}

impl Worker {
    /// Executes one operation.
    fn run_op(&mut self, op: &DiskOp) -> Result<DiskDone, DiskError> {
        let result = self.execute(op).map_err(|e| self.describe(op, &e));
        if let Err(error) = &result {
            tracing::warn!(%error, "disk operation failed");
        }
        result
    }

    fn execute(&mut self, op: &DiskOp) -> io::Result<DiskDone> {
        match op {
            DiskOp::Create { file } => self.create(*file)?,
            DiskOp::Write { file, offset, data } => {
                self.open(*file)?.write_all_at(data, *offset)?
            }
            DiskOp::Sync { file } => self.open(*file)?.sync_data()?,
            DiskOp::Read { file, offset, len } => {
                let len = usize::try_from(*len).map_err(io::Error::other)?;
                let mut buf = vec![0; len];
                self.open(*file)?.read_exact_at(&mut buf, *offset)?;
                return Ok(DiskDone::Data(Bytes::from(buf)));
            }
            DiskOp::ReadUpTo { file, offset, len } => {
                let len = usize::try_from(*len).map_err(io::Error::other)?;
                let buf = read_up_to(self.open(*file)?, *offset, len)?;
                return Ok(DiskDone::Data(Bytes::from(buf)));
            }
            DiskOp::Truncate { file, len } => self.open(*file)?.set_len(*len)?,
            DiskOp::Delete { file } => self.delete(*file)?,
        }
        Ok(DiskDone::Done)
    }

    /// Creates an empty file (and missing parent directories), durably.
    fn create(&mut self, file: FileId) -> io::Result<()> {
        let path = self.path(file);
        let parent = path.parent().expect("invariant: data files live below the data dir");
        create_dirs_durable(parent)?;
        let handle =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        handle.sync_all()?;
        sync_dir(parent)?;
        self.cache(file, handle);
        Ok(())
    }

    /// Removes a file durably; a file that is already gone counts as removed.
    fn delete(&mut self, file: FileId) -> io::Result<()> {
        self.files.remove(&file);
        let path = self.path(file);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        sync_dir(path.parent().expect("invariant: data files live below the data dir"))
    }

    /// The cached handle of an existing file, opening it on first use.
    fn open(&mut self, file: FileId) -> io::Result<&File> {
        if !self.files.contains_key(&file) {
            let handle = OpenOptions::new().read(true).write(true).open(self.path(file))?;
            self.cache(file, handle);
        }
        Ok(self.files.get(&file).expect("invariant: cached just above"))
    }

    fn cache(&mut self, file: FileId, handle: File) {
        if self.files.len() >= OPEN_FILES_PER_THREAD && !self.files.contains_key(&file) {
            let victim = *self.files.keys().next().expect("invariant: the cache is full");
            self.files.remove(&victim);
        }
        self.files.insert(file, handle);
    }

    fn path(&self, file: FileId) -> PathBuf {
        self.data_dir.join(file.relative_path())
    }

    fn describe(&self, op: &DiskOp, error: &io::Error) -> DiskError {
        match to_disk_error(error) {
            DiskError::NoSpace => DiskError::NoSpace,
            DiskError::Io(msg) => {
                let path = self.path(op.file());
                DiskError::Io(format!("{} {}: {msg}", op_name(op), path.display()))
            }
        }
    }
}

/// Maps an OS error to the core's vocabulary: a full device (ENOSPC, EDQUOT) is `NoSpace`.
pub fn to_disk_error(error: &io::Error) -> DiskError {
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    let full = matches!(error.raw_os_error(), Some(ENOSPC | EDQUOT))
        || matches!(error.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded);
    if full { DiskError::NoSpace } else { DiskError::Io(error.to_string()) }
}

fn op_name(op: &DiskOp) -> &'static str {
    match op {
        DiskOp::Create { .. } => "create",
        DiskOp::Write { .. } => "write",
        DiskOp::Sync { .. } => "sync",
        DiskOp::Read { .. } | DiskOp::ReadUpTo { .. } => "read",
        DiskOp::Truncate { .. } => "truncate",
        DiskOp::Delete { .. } => "delete",
    }
}

/// Up to `len` bytes of `file` from `offset`: fewer where the file ends sooner.
fn read_up_to(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Creates `dir` and its missing ancestors, fsyncing each new entry's parent directory.
pub fn create_dirs_durable(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dirs_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    sync_dir(parent.unwrap_or(Path::new(".")))
}

/// Makes a directory's entries (creations, removals) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_core::{PartitionKey, TopicId};
    use std::time::Duration;

    struct Harness {
        _dir: tempfile::TempDir,
        root: PathBuf,
        disk: DiskExecutor,
        done: tokio::sync::mpsc::UnboundedReceiver<Input>,
        next: u64,
    }

    impl Harness {
        fn new() -> Harness {
            let dir = tempfile::tempdir().expect("temp dir");
            let root = dir.path().join("data");
            let (tx, done) = tokio::sync::mpsc::unbounded_channel();
            let disk = DiskExecutor::start(&root, tx).expect("start disk threads");
            Harness { _dir: dir, root, disk, done, next: 0 }
        }

        fn run(&mut self, op: DiskOp) -> Result<DiskDone, DiskError> {
            self.next += 1;
            self.disk.submit(IoToken(self.next), op);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                match self.done.try_recv() {
                    Ok(Input::Disk { token, result }) => {
                        assert_eq!(token, IoToken(self.next));
                        return result;
                    }
                    Ok(other) => panic!("unexpected input {other:?}"),
                    Err(_) if std::time::Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("no completion: {e}"),
                }
            }
        }
    }

    #[test]
    fn create_write_read_truncate_delete() {
        let mut h = Harness::new();
        let file = FileId::PartitionSegment {
            key: PartitionKey { topic: TopicId(7), partition: 3 },
            base: 0,
        };
        assert_eq!(h.run(DiskOp::Create { file }), Ok(DiskDone::Done));
        assert!(h.root.join(file.relative_path()).is_file());
        let data = Bytes::from_static(b"hello world");
        assert_eq!(h.run(DiskOp::Write { file, offset: 4, data }), Ok(DiskDone::Done));
        assert_eq!(h.run(DiskOp::Sync { file }), Ok(DiskDone::Done));
        let read = h.run(DiskOp::Read { file, offset: 0, len: 15 });
        assert_eq!(read, Ok(DiskDone::Data(Bytes::from_static(b"\0\0\0\0hello world"))));
        assert_eq!(h.run(DiskOp::Truncate { file, len: 9 }), Ok(DiskDone::Done));
        assert!(h.run(DiskOp::Read { file, offset: 0, len: 10 }).is_err(), "short read fails");
        let up_to = h.run(DiskOp::ReadUpTo { file, offset: 2, len: 10 });
        assert_eq!(up_to, Ok(DiskDone::Data(Bytes::from_static(b"\0\0hello"))), "stops at the end");
        let past = h.run(DiskOp::ReadUpTo { file, offset: 20, len: 4 });
        assert_eq!(past, Ok(DiskDone::Data(Bytes::new())), "nothing past the end");
        assert_eq!(h.run(DiskOp::Delete { file }), Ok(DiskDone::Done));
        assert!(!h.root.join(file.relative_path()).exists());
        assert_eq!(h.run(DiskOp::Delete { file }), Ok(DiskDone::Done), "missing is deleted");
    }

    #[test]
    fn wal_files_and_missing_files() {
        let mut h = Harness::new();
        let seg = FileId::WalSegment { first_seq: 1 };
        assert!(matches!(h.run(DiskOp::Sync { file: seg }), Err(DiskError::Io(_))));
        assert_eq!(h.run(DiskOp::Create { file: seg }), Ok(DiskDone::Done));
        let data = Bytes::from_static(b"abc");
        assert_eq!(h.run(DiskOp::Write { file: seg, offset: 0, data }), Ok(DiskDone::Done));
        let bytes = fs::read(h.root.join("wal/00000000000000000001.wal")).expect("segment");
        assert_eq!(bytes, b"abc");
    }

    #[test]
    fn the_executor_writes_only_what_the_core_asks_for() {
        // Pre-writing is the core's (its own `Write`s of zeros): an idle WAL thread adds nothing.
        let mut h = Harness::new();
        let seg = FileId::WalSegment { first_seq: 5 };
        let path = h.root.join("wal/00000000000000000005.wal");
        assert_eq!(h.run(DiskOp::Create { file: seg }), Ok(DiskDone::Done));
        let data = Bytes::from_static(b"frame");
        assert_eq!(h.run(DiskOp::Write { file: seg, offset: 0, data }), Ok(DiskDone::Done));
        assert_eq!(h.run(DiskOp::Sync { file: seg }), Ok(DiskDone::Done));
        thread::sleep(Duration::from_millis(50));
        assert_eq!(fs::read(&path).expect("segment"), b"frame");
    }

    #[test]
    fn wal_operations_run_inline_only_when_nothing_of_the_wal_is_pending() {
        let mut h = Harness::new();
        let seg = FileId::WalSegment { first_seq: 9 };
        let done = h.disk.run_wal_inline(IoToken(100), DiskOp::Create { file: seg });
        assert!(matches!(
            done,
            Ok(Input::Disk { token: IoToken(100), result: Ok(DiskDone::Done) })
        ));
        // Submitted and not yet handed to the driver: later WAL operations queue behind it.
        h.disk.submit(IoToken(101), DiskOp::Sync { file: seg });
        assert!(h.disk.run_wal_inline(IoToken(102), DiskOp::Sync { file: seg }).is_err());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match h.done.try_recv() {
                Ok(Input::Disk { token: IoToken(101), result }) => break assert!(result.is_ok()),
                Ok(other) => panic!("unexpected input {other:?}"),
                Err(_) if std::time::Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("no completion: {e}"),
            }
        }
        h.disk.completed(IoToken(101));
        // Now it may run here again (unless the WAL thread is busy pre-writing: retry).
        let op = DiskOp::Sync { file: seg };
        let ran = (0..1_000).any(|_| {
            let ok = h.disk.run_wal_inline(IoToken(103), op.clone()).is_ok();
            if !ok {
                thread::sleep(Duration::from_millis(2));
            }
            ok
        });
        assert!(ran, "the WAL thread never went idle");
        // Other files always go to their thread.
        let log = FileId::PartitionSegment {
            key: PartitionKey { topic: TopicId(1), partition: 0 },
            base: 0,
        };
        assert!(h.disk.run_wal_inline(IoToken(104), DiskOp::Create { file: log }).is_err());
    }

    #[test]
    fn full_devices_map_to_no_space() {
        assert_eq!(to_disk_error(&io::Error::from_raw_os_error(28)), DiskError::NoSpace);
        assert_eq!(to_disk_error(&io::Error::from_raw_os_error(122)), DiskError::NoSpace);
        assert!(matches!(to_disk_error(&io::Error::from_raw_os_error(5)), DiskError::Io(_)));
    }

    #[test]
    fn partition_logs_spread_over_the_pool() {
        let lanes: std::collections::BTreeSet<usize> = (0..8)
            .map(|p| PartitionKey { topic: TopicId(1), partition: p })
            .map(|key| pool_index(FileId::PartitionSegment { key, base: 0 }, POOL_THREADS))
            .collect();
        assert_eq!(lanes.len(), POOL_THREADS);
    }
}
