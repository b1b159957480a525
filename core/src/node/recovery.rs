//! A node half-way through start-up: its metastore and ingress WAL are rebuilt (they are small
//! and read whole), its partition logs are not yet. Those may be far larger than memory, so the
//! runtime reads them a chunk at a time into the `PartitionScan`s this hands out (each with the
//! seal files found for its log, so segments with a trusted seal are adopted without a read),
//! then `finish` assembles the node. `Node::recover` does the same with whole files.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::PartitionKey;
use crate::io::FileId;
use crate::partition::{PartitionLog, PartitionScan};

use super::Node;

/// See the module docs; made by `Node::begin_recovery`.
pub struct Recovery {
    node: Node,
    /// Files read whole: synced before the node trusts them (with the scanned logs).
    found: Vec<FileId>,
    /// Seal files found, by partition and segment base, not yet handed to a scan.
    seals: BTreeMap<PartitionKey, BTreeMap<u64, Bytes>>,
}

impl Recovery {
    pub(super) fn new(
        node: Node,
        found: Vec<FileId>,
        seals: BTreeMap<PartitionKey, BTreeMap<u64, Bytes>>,
    ) -> Recovery {
        Recovery { node, found, seals }
    }

    /// A scan for the partition log of `key`, holding the seal files found for it. It skips
    /// remembering this node's own records below its durable WAL checkpoint (this node never
    /// re-sends those, so idempotent commits need not recognise them): recovering many large
    /// logs then holds little besides their indexes.
    pub fn partition_scan(&mut self, key: PartitionKey) -> PartitionScan {
        let config = &self.node.config;
        let checkpoint = self.node.wal.durable_checkpoint();
        PartitionScan::new(key, config.partition_index_interval_bytes)
            .with_segment_bytes(config.partition_segment_bytes)
            .forgetting_origin_below(config.node_id, checkpoint)
            .with_seals(self.seals.remove(&key).unwrap_or_default())
    }

    /// The recovered node, with every partition log of the data directory in `partitions`.
    /// Seal files no log adopted (stale, damaged, or with no segment) and stale consumer-journal
    /// files are deleted before the node serves, once the start-up syncs are done.
    pub fn finish(self, partitions: Vec<PartitionLog>) -> Node {
        let Recovery { mut node, mut found, seals } = self;
        let mut stale: Vec<FileId> = seals
            .into_iter()
            .flat_map(|(key, bases)| {
                bases.into_keys().map(move |base| FileId::PartitionSeal { key, base })
            })
            .collect();
        for mut log in partitions {
            log.idempotent = node.config.idempotent_commits;
            found.extend(log.startup_sync_files());
            stale.extend(log.take_stale_seals());
            let (adopted, scanned) = log.recovered_segments();
            node.recovered_segments.0 += adopted;
            node.recovered_segments.1 += scanned;
            node.partitions.insert(log.key(), log);
        }
        node.sync_found_files(found.iter());
        stale.append(&mut node.consumers.stale_files);
        node.startup_deletes = stale;
        if node.startup_syncs_left == 0 {
            node.begin_startup_deletes();
        }
        node.pump();
        node
    }
}
