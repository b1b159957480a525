//! A node half-way through start-up: its metastore and ingress WAL are rebuilt (they are small
//! and read whole), its partition logs are not yet. Those may be far larger than memory, so the
//! runtime reads them a chunk at a time into the `PartitionScan`s this hands out, then `finish`
//! assembles the node. `Node::recover` does the same with whole files.

use crate::PartitionKey;
use crate::io::FileId;
use crate::partition::{PartitionLog, PartitionScan};

use super::Node;

/// See the module docs; made by `Node::begin_recovery`.
pub struct Recovery {
    node: Node,
    /// Files read whole: synced before the node trusts them (with the scanned logs).
    found: Vec<FileId>,
}

impl Recovery {
    pub(super) fn new(node: Node, found: Vec<FileId>) -> Recovery {
        Recovery { node, found }
    }

    /// A scan for the partition log of `key`. It skips remembering this node's own records below
    /// its durable WAL checkpoint (this node never re-sends those, so idempotent commits need not
    /// recognise them): recovering many large logs then holds little besides their indexes.
    pub fn partition_scan(&self, key: PartitionKey) -> PartitionScan {
        let config = &self.node.config;
        let checkpoint = self.node.wal.durable_checkpoint();
        PartitionScan::new(key, config.partition_index_interval_bytes)
            .with_segment_bytes(config.partition_segment_bytes)
            .forgetting_origin_below(config.node_id, checkpoint)
    }

    /// The recovered node, with every partition log of the data directory in `partitions`.
    pub fn finish(self, partitions: Vec<PartitionLog>) -> Node {
        let Recovery { mut node, mut found } = self;
        for mut log in partitions {
            log.idempotent = node.config.idempotent_commits;
            found.extend(log.files());
            node.partitions.insert(log.key(), log);
        }
        node.sync_found_files(found.iter());
        node.pump();
        node
    }
}
