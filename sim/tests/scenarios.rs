//! Runs every named scenario of `narad_sim::scenarios::catalog` and snapshot-tests its outcome
//! summary (snapshots in `scenarios/snapshots/`). Each scenario also checks that its fault story
//! actually happened (the fault hit, the latch/rollback/discard was observed) and passed.

use narad_sim::scenarios::{Scenario, by_name, catalog, summary};

fn run(name: &str) {
    let scenario: Scenario = by_name(name).expect("scenario exists");
    let outcome = scenario.run(false);
    let text = summary(&scenario, &outcome);
    if !outcome.passed {
        eprintln!("{}", outcome.failure_report());
    }
    insta::with_settings!({
        snapshot_path => "../../scenarios/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
    if let Err(what) = (scenario.expect)(&outcome) {
        panic!("scenario {name}: {what}\n{}", outcome.failure_report());
    }
    assert!(outcome.passed, "scenario {name} broke an invariant:\n{}", outcome.failure_report());
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { run(stringify!($name)); } )*

        #[test]
        fn every_catalogued_scenario_has_a_test() {
            let tested = [$(stringify!($name)),*];
            for scenario in catalog::all() {
                assert!(tested.contains(&scenario.name), "no test for scenario {}", scenario.name);
            }
        }
    };
}

scenarios!(
    wal_fsync_failure,
    partition_torn_write,
    crash_between_wal_fsync_and_reply,
    crash_with_commits_above_checkpoint,
    stuck_destination,
    topic_deleted_with_records_in_wal,
    disk_full_and_recovery,
    disk_full_with_a_prewritten_wal,
    partition_log_lies_about_fsync,
    bit_flip_at_rest,
    new_files_vanish_without_dir_fsync,
    torn_tails_at_power_loss,
    failed_commits_are_cut_back_before_the_next,
    wal_sequence_reused_after_a_lying_fsync,
    a_roll_during_a_failed_fsync,
    a_deletion_interrupted_by_power_loss,
    leader_isolated_during_load,
    owner_dies_and_its_share_is_rerouted,
    topic_deleted_while_a_node_is_cut_off,
    owner_killed_with_leases_outstanding,
    ack_whose_journal_fsync_fails,
    counts_granted_ahead_lost_in_a_power_loss,
);
