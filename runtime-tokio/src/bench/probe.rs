//! The serialized fdatasync probe: one thread appends 256 bytes to a fresh file and fdatasyncs,
//! in a loop, for a bounded time. Its rate is the disk's price of one durable acknowledgement
//! with nothing shared, the yardstick every produce figure is compared against in the same run
//! (the host's disk speed drifts and can be throttled: only ratios measured together count).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::histogram::Histogram;

/// Bytes written per iteration, the payload size of the peer comparison.
const WRITE_BYTES: usize = 256;
/// Iterations at most, whatever the duration (bounds the loop by count too).
const MAX_ITERATIONS: u64 = 10_000_000;

/// What the probe measured.
pub struct ProbeResult {
    pub ops_per_sec: f64,
    pub latency: Histogram,
}

/// Runs the probe in a temporary file below `dir` for `duration`. With `overwrite` the file is
/// first written and synced to its final size, so each iteration overwrites allocated blocks
/// (no size change to commit), for comparison with plain appends.
pub fn run(dir: &Path, duration: Duration, overwrite: bool) -> io::Result<ProbeResult> {
    let path = dir.join(format!(".narad-fsync-probe-{}", std::process::id()));
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
    let result = probe(&file, duration, overwrite);
    drop(file);
    std::fs::remove_file(&path)?;
    result
}

fn probe(file: &std::fs::File, duration: Duration, overwrite: bool) -> io::Result<ProbeResult> {
    let block = [b'p'; WRITE_BYTES];
    if overwrite {
        let area = vec![0u8; 64 * 1024 * 1024];
        file.write_all_at(&area, 0)?;
        file.sync_all()?;
    }
    let mut latency = Histogram::default();
    let start = Instant::now();
    let mut offset = 0u64;
    let mut done = 0u64;
    while start.elapsed() < duration && done < MAX_ITERATIONS {
        let t = Instant::now();
        file.write_all_at(&block, offset)?;
        file.sync_data()?;
        latency.record(t.elapsed().as_micros() as u64);
        offset = (offset + WRITE_BYTES as u64) % (64 * 1024 * 1024);
        done += 1;
    }
    Ok(ProbeResult { ops_per_sec: done as f64 / start.elapsed().as_secs_f64(), latency })
}
