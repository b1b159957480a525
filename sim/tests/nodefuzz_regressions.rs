//! Replays every saved input of the whole-node fuzz target (`fuzz/fuzz_targets/node.rs`)
//! through `narad_sim::nodefuzz::run`, so plain `cargo test` keeps checking them without
//! cargo-fuzz: `fuzz/regressions/node/` (minimised crashes, one file per finding; `open-*` ones
//! are not fixed yet and must still fail) and `fuzz/corpus/node/` (the seed corpus).
//! `nodefuzz_write_seed_corpus` (ignored) regenerates the seeds; `NODEFUZZ_REPLAY_DIR` names one
//! more directory to replay.

use std::path::{Path, PathBuf};

use narad_sim::nodefuzz::{FuzzInput, Report, run, run_input};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn fuzz_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz").join(sub)
}

/// Every file in `dir` (none if it does not exist), in name order.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

/// Runs every input of `dir`; panics naming each one that fails. A file named `open-*` is a
/// finding not fixed yet: it must still fail (so the replay stays green meanwhile), and once
/// it passes the test says to drop the prefix, so that it guards the fix from then on.
fn replay(dir: &Path) -> usize {
    let files = inputs(dir);
    let mut wrong = Vec::new();
    for path in &files {
        let data = std::fs::read(path).expect("readable input");
        let failed = std::panic::catch_unwind(|| run(&data)).is_err();
        let open = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("open-"));
        match (open, failed) {
            (false, true) => wrong.push(format!("{}: fails", path.display())),
            (true, false) => wrong.push(format!("{}: passes now: drop `open-`", path.display())),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "nodefuzz inputs: {wrong:#?}");
    files.len()
}

#[test]
fn nodefuzz_regressions_replay() {
    replay(&fuzz_dir("regressions/node"));
}

#[test]
fn nodefuzz_corpus_replays() {
    replay(&fuzz_dir("corpus/node"));
}

/// `NODEFUZZ_REPLAY_DIR=<dir>`: also replays every file of `<dir>` (a campaign's corpus).
#[test]
fn nodefuzz_extra_dir_replays() {
    if let Some(dir) = std::env::var_os("NODEFUZZ_REPLAY_DIR") {
        let count = replay(Path::new(&dir));
        eprintln!("replayed {count} inputs of {}", Path::new(&dir).display());
    }
}

/// Random inputs whose runs do something worth starting from: acknowledge records and crash.
fn interesting(report: &Report) -> bool {
    report.acked > 0 && report.starts > 2 && report.checked
}

/// Writes a seed corpus of random inputs that acknowledge records, restart the node and pass
/// the final checks (inputs that fail are skipped): `cargo test -p narad-sim --test nodefuzz_regressions -- --ignored`.
#[test]
#[ignore = "writes files: run by hand to regenerate fuzz/corpus/node/"]
fn nodefuzz_write_seed_corpus() {
    let dir = fuzz_dir("corpus/node");
    std::fs::create_dir_all(&dir).expect("corpus directory");
    let mut rng = ChaCha8Rng::seed_from_u64(0x6e6f_6465);
    let mut written = 0;
    for attempt in 0..5_000 {
        let len = rng.random_range(64..2_048);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        // An input that fails is a finding, not a seed (the corpus must replay green).
        let Ok(report) = std::panic::catch_unwind(|| run_input(&FuzzInput::decode(&data))) else {
            continue;
        };
        if interesting(&report) {
            std::fs::write(dir.join(format!("seed-{attempt:04}")), &data).expect("write seed");
            written += 1;
        }
        if written == 24 {
            break;
        }
    }
    assert!(written > 0, "no random input acknowledged a record and restarted");
}
