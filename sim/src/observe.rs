//! What the checker learns from the disk, the same way in both tiers: the records a WAL write
//! stages (message id, topic incarnation), the frames a partition write lands, the damage a disk
//! fault did, and the records a start-up will find committed.

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::partition::{PartitionRecord, RecordView};
use narad_core::{DiskOp, FileId, codec};
use narad_sim_runtime::SimDisk;

use crate::checker::Checker;
use crate::payload::{ids_in, parse_id};

/// WAL writes name the records node `node` staged: message id and topic incarnation (the
/// checker learns which incarnation each attempt really reached).
pub fn note_stagings(checker: &mut Checker, node: u32, op: &DiskOp) -> usize {
    let DiskOp::Write { file: FileId::WalSegment { .. }, data, .. } = op else { return 0 };
    let mut staged = 0;
    for frame in codec::scan(data).frames {
        let Some(record) = narad_core::wal::WalRecord::decode(frame.body(data)) else {
            continue;
        };
        if let Some(id) = parse_id(&record.payload) {
            checker.staged(node, record.seq, id, record.topic_id, record.timestamp_ms);
            staged += 1;
        }
    }
    staged
}

/// A write to a partition log landed: records past the reported watermark may be in the file,
/// and each frame tells where its record came from.
pub fn note_partition_tail(checker: &mut Checker, op: &DiskOp) {
    let DiskOp::Write { file: FileId::PartitionSegment { key, .. }, data, .. } = op else {
        return;
    };
    checker.partition_write_landed(*key);
    for frame in codec::scan(data).frames {
        if let Some(record) = RecordView::decode(frame.body(data)) {
            let origin = (record.origin_node.0.saturating_sub(1), record.origin_seq);
            checker.frame_landed(*key, record.offset, origin, record.timestamp_ms);
        }
    }
}

/// Tells the checker which messages the disk's latest faults damaged.
pub fn collect_damage(checker: &mut Checker, disk: &mut SimDisk) {
    for damage in disk.take_damage() {
        if let FileId::PartitionSeal { key, base } = damage.file {
            // A damaged seal is not trusted (its CRC, length and base are checked), so it
            // costs a scan, never a record: the checker stays strict about what it causes,
            // unless its segment was damaged before (the scan now finds what the seal hid).
            checker.seal_damaged(key, base);
            continue;
        }
        let ids = ids_in(&damage.bytes);
        checker.damaged(&ids);
        // A damaged last frame looks exactly like a torn tail, and recovery truncates it: the
        // log may legitimately come back shorter.
        if let FileId::PartitionSegment { key, base } = damage.file {
            checker.segment_damaged(key, base);
        }
    }
}

/// (origin node index, WAL sequence number) of every record found in a valid frame of a
/// partition log: the node will treat them as committed (a commit can land durably while the
/// crash hides its answer).
pub fn recovered_origins(files: &BTreeMap<FileId, Bytes>) -> Vec<(u32, u64)> {
    let mut seqs = Vec::new();
    for (file, bytes) in files {
        if let FileId::PartitionSegment { .. } = file {
            for frame in codec::scan(bytes).frames {
                if let Some(record) = PartitionRecord::decode(frame.body(bytes)) {
                    seqs.push((record.origin_node.0.saturating_sub(1), record.origin_seq));
                }
            }
        }
    }
    seqs
}
