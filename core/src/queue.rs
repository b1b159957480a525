//! Queue consume (docs/design.md §4.8): a consume without an offset leases the next available
//! message of a partition for the topic's visibility timeout and hands out a receipt handle;
//! the worker acks, extends or nacks it. The owner of each partition keeps that partition's
//! queue (`state.rs`); what must survive a crash (acks and delivery counts) goes through the
//! node's consumer journal (`journal.rs`, entries in `entry.rs`), group-committed so that an ack
//! costs a share of one flush. Handles are `handle.rs`.

mod entry;
mod handle;
mod journal;
mod state;

pub use entry::JournalEntry;
pub use handle::{ReceiptHandle, nonce, owner_secret};
pub use journal::{ConsumerJournal, JournalIo, RecoveredJournal, Settled, recover};
pub use state::{DurableQueue, Lease, LeaseState, PartitionQueue, StaleHandle};
