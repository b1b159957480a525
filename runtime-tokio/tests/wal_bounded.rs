//! Acceptance item 6 of issue 2: once the dispatch backlog drains, the ingress WAL is reclaimed:
//! `<data-dir>/wal/` holds less than 2 MiB however much was produced (here 30 MiB).

mod common;

use std::thread;
use std::time::Duration;

use common::{TestNode, data_dir, dir_bytes, wait_until};

const THREADS: usize = 8;
const MESSAGES_PER_THREAD: usize = 60;
const MESSAGE_BYTES: usize = 64 * 1024;
const LIMIT_BYTES: u64 = 2 * 1024 * 1024;

#[test]
fn wal_is_reclaimed_after_dispatch() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let client = node.client();
    client.create_topic("bulk", 4);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let client = client.clone();
            thread::spawn(move || {
                for i in 0..MESSAGES_PER_THREAD {
                    let mut body = vec![b'a' + (i % 26) as u8; MESSAGE_BYTES];
                    body[..8].copy_from_slice(&((t * 1000 + i) as u64).to_le_bytes());
                    let (status, _) = client.post("/v1/topics/bulk/produce", &body);
                    assert_eq!(status, 202, "thread {t} message {i}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("producer");
    }
    let total = (THREADS * MESSAGES_PER_THREAD) as u64;
    eprintln!("produced {} MiB", total * MESSAGE_BYTES as u64 / (1024 * 1024));

    let drained =
        wait_until(Duration::from_secs(60), || client.metric("narad_dispatch_backlog") == 0.0);
    assert!(drained, "dispatch backlog never drained; log:\n{}", node.log());
    assert_eq!(common::visible_records(&client, "bulk"), total, "everything committed");
    let wal = dir.join("wal");
    let mut bytes = dir_bytes(&wal);
    let small = wait_until(Duration::from_secs(30), || {
        bytes = dir_bytes(&wal);
        bytes < LIMIT_BYTES
    });
    eprintln!("wal/ holds {bytes} bytes after the backlog drained");
    assert!(small, "wal/ still holds {bytes} bytes (limit {LIMIT_BYTES}); log:\n{}", node.log());
}
