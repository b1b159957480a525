//! Acceptance item 4 of issue 2: the data directory is a small tmpfs that fills up. Produces
//! then answer 5xx (never hang, never 202 after the first 5xx); after the filesystem grows and
//! the node restarts, every acknowledged record is readable.
//!
//! Needs root (to mount a tmpfs). Where mounting is impossible the test says so loudly on
//! stderr and returns without asserting anything: it is reported as passed by the harness but
//! the message "SKIPPED" marks it as not run.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Client, TestNode, payload_bytes};

const MESSAGE_BYTES: usize = 64 * 1024;
const ATTEMPTS_AFTER_FAILURE: usize = 30;

/// A tmpfs mounted for the test; unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Tmpfs { dir: dir.to_path_buf() })
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.dir)
            .status()
            .expect("run mount -o remount");
        assert!(status.success(), "remounting the tmpfs with size={size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Produces distinct messages one at a time until the node fails one, then keeps trying.
/// Returns (acknowledged payloads, every payload sent).
fn fill_the_disk(client: &Client) -> (Vec<Vec<u8>>, HashSet<Vec<u8>>) {
    let (mut acked, mut sent) = (Vec::new(), HashSet::new());
    let mut failures = 0;
    let deadline = Instant::now() + Duration::from_secs(180);
    for i in 0u64.. {
        assert!(Instant::now() < deadline, "the disk never filled up");
        let mut body = vec![b'a' + (i % 26) as u8; MESSAGE_BYTES];
        body[..8].copy_from_slice(&i.to_le_bytes());
        sent.insert(body.clone());
        let (status, answer) = client.post("/v1/topics/full/produce", &body);
        let answer = String::from_utf8_lossy(&answer);
        match status {
            202 => {
                assert_eq!(failures, 0, "message {i} answered 202 after a 5xx");
                acked.push(body);
            }
            500..=599 => {
                if failures == 0 {
                    eprintln!("first failure at message {i}: {status} {answer}");
                }
                failures += 1;
                if failures == ATTEMPTS_AFTER_FAILURE {
                    return (acked, sent);
                }
            }
            0 => panic!("message {i}: no answer within the request timeout (hang)"),
            other => panic!("message {i}: unexpected status {other}: {answer}"),
        }
    }
    unreachable!("the loop only ends by returning")
}

#[test]
fn disk_full_fails_cleanly_and_loses_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("data");
    let tmpfs = match Tmpfs::mount(&dir, "8m") {
        Ok(tmpfs) => tmpfs,
        Err(error) => {
            eprintln!(
                "\n!!! SKIPPED disk_full_fails_cleanly_and_loses_nothing: cannot mount a tmpfs \
                 here ({error}). Run the tests as root to exercise the disk-full path. !!!\n"
            );
            return;
        }
    };
    let mut node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("full", 2);
    let (acked, sent) = fill_the_disk(&client);
    eprintln!("{} messages acknowledged before the disk filled", acked.len());
    assert_eq!(client.metric("narad_wal_failed"), 1.0, "the WAL latched");
    node.kill9();

    tmpfs.resize("64m");
    let node = TestNode::start(&dir);
    let client = node.client();
    let expected = acked.len() as u64;
    let drained = common::wait_drained(&client, "full", expected, Duration::from_secs(60));
    assert!(drained, "acknowledged records missing after restart; log:\n{}", node.log());
    let read: Vec<Vec<u8>> =
        (0..2).flat_map(|p| client.read_partition("full", p)).map(|m| payload_bytes(&m)).collect();
    let read_set: HashSet<&Vec<u8>> = read.iter().collect();
    assert!(read.iter().all(|r| sent.contains(r)), "no phantom records");
    assert!(acked.iter().all(|a| read_set.contains(a)), "every acknowledged record readable");
    let duplicates = read.len() - read_set.len();
    assert_eq!(duplicates, 0, "{duplicates} of {} records read back twice", read.len());
    drop(node);
}
