//! The scenario catalogue: every named scenario, single-node (`single.rs`) and cluster
//! (`cluster.rs`) and queue consume (`queue.rs`), in the order `narad-sim scenarios` lists them.

use super::Scenario;
use super::{cluster, queue, single};

/// Every scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        single::wal_fsync_failure(),
        single::partition_torn_write(),
        single::crash_between_wal_fsync_and_reply(),
        single::crash_with_commits_above_checkpoint(),
        single::stuck_destination(),
        single::topic_deleted_with_records_in_wal(),
        single::disk_full_and_recovery(),
        single::disk_full_with_a_prewritten_wal(),
        single::partition_log_lies_about_fsync(),
        single::bit_flip_at_rest(),
        single::new_files_vanish_without_dir_fsync(),
        single::torn_tails_at_power_loss(),
        single::failed_commits_are_cut_back_before_the_next(),
        single::wal_sequence_reused_after_a_lying_fsync(),
        single::a_roll_during_a_failed_fsync(),
        single::a_deletion_interrupted_by_power_loss(),
        cluster::leader_isolated_during_load(),
        cluster::owner_dies_and_its_share_is_rerouted(),
        cluster::topic_deleted_while_a_node_is_cut_off(),
        queue::owner_killed_with_leases_outstanding(),
        queue::ack_whose_journal_fsync_fails(),
        queue::counts_granted_ahead_lost_in_a_power_loss(),
    ]
}
