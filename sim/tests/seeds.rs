//! Replays every regression seed in `seeds/` (docs/design.md §5: every seed that ever failed is
//! checked forever). A failure prints the seed's note, the full failure report and the replay
//! command.

use std::path::Path;

use narad_sim::run_seed_catching;
use narad_sim::seeds::load_corpus;

#[test]
fn every_regression_seed_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds");
    let corpus = load_corpus(&dir).expect("seeds/ is readable and well-formed");
    assert!(!corpus.is_empty(), "seeds/ holds at least one seed");
    let mut failures = Vec::new();
    for entry in &corpus {
        let outcome = run_seed_catching(entry.seed, &entry.options, false);
        if !outcome.passed {
            eprintln!(
                "{} ({}): {}\n{}",
                entry.origin,
                entry.note,
                outcome.summary_line(),
                outcome.failure_report()
            );
            failures.push(format!("{:#x} ({})", entry.seed, entry.note));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} regression seeds fail:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
}
