//! The topic catalogue of a single node: topics with their incarnation ids, kept in an
//! append-only, CRC-framed log that is fsynced before a change is acknowledged.
//!
//! It answers the questions the Raft metastore will answer in a cluster, with the same shape:
//! changes are *proposed* and acknowledged once durable (`propose`, `on_io`), reads are local
//! (`topic`, `topic_by_id`, `topics`), and the destructive question "is this incarnation really
//! gone?" (`confirm_gone`) is answered by the authority — here the node itself, whose catalogue is
//! the only copy and always caught up.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::api::{ClientError, TopicInfo};
use crate::codec::{Reader, ScanEnd, put_frame, scan};
use crate::constants::{DEFAULT_PARTITIONS, MAX_PARTITIONS, MAX_TOPIC_NAME_BYTES};
use crate::ids::TopicId;
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::node::RecoveryError;

/// A change to the catalogue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Create {
        name: String,
        partitions: Option<u32>,
        retention_ms: Option<u64>,
        now_ms: u64,
    },
    Delete {
        name: String,
    },
}

/// What an applied change did, for the node to reply and clean up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    Created(TopicInfo),
    Deleted(TopicInfo),
}

struct InFlight<W> {
    entry: Entry,
    waiter: W,
    /// Where the entry's frame starts (the file is cut back here if the write fails).
    offset: u64,
    /// This write also created the file.
    created: bool,
    ios_left: u32,
    error: Option<DiskError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Create(TopicInfo),
    Delete { id: TopicId },
}

/// The catalogue. `W` identifies whoever waits for a proposed change.
pub struct Catalog<W> {
    topics: BTreeMap<String, TopicInfo>,
    names: BTreeMap<TopicId, String>,
    next_id: u64,
    file_size: u64,
    file_exists: bool,
    queue: VecDeque<(Change, W)>,
    in_flight: Option<InFlight<W>>,
    /// Repair operations (truncate + sync) in flight.
    repairs_left: u32,
    /// The file may hold bytes past `file_size` that must be cut before the next write.
    needs_repair: bool,
    outbox: VecDeque<DiskOp>,
}

/// Checks a topic name: `[A-Za-z0-9._-]{1,200}`, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<(), ClientError> {
    let charset_ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_BYTES || !charset_ok {
        return Err(ClientError::BadRequest(format!(
            "invalid topic name {name:?}: use 1-{MAX_TOPIC_NAME_BYTES} characters from [A-Za-z0-9._-]"
        )));
    }
    if name == "." || name == ".." {
        return Err(ClientError::BadRequest(format!(
            "invalid topic name {name:?}"
        )));
    }
    Ok(())
}

impl<W> Catalog<W> {
    /// Rebuilds the catalogue from its log's bytes (`None`: no file yet).
    pub fn recover(bytes: Option<&Bytes>) -> Result<Catalog<W>, RecoveryError> {
        let mut catalog = Catalog {
            topics: BTreeMap::new(),
            names: BTreeMap::new(),
            next_id: 1,
            file_size: 0,
            file_exists: bytes.is_some(),
            queue: VecDeque::new(),
            in_flight: None,
            repairs_left: 0,
            needs_repair: false,
            outbox: VecDeque::new(),
        };
        let Some(bytes) = bytes else {
            return Ok(catalog);
        };
        let file = FileId::Catalog.relative_path();
        let scanned = scan(bytes);
        if let ScanEnd::Corrupt {
            bad_pos,
            next_valid_pos,
        } = scanned.end
        {
            let (bad_pos, next_valid_pos) = (bad_pos as u64, next_valid_pos as u64);
            return Err(RecoveryError::CorruptLog {
                file,
                bad_pos,
                next_valid_pos,
            });
        }
        for found in &scanned.frames {
            let entry =
                decode_entry(found.body(bytes)).ok_or_else(|| RecoveryError::Inconsistent {
                    file: file.clone(),
                    what: format!("undecodable entry at byte {}", found.pos),
                })?;
            catalog.apply(entry);
        }
        catalog.file_size = scanned.valid_len() as u64;
        if catalog.file_size < bytes.len() as u64 {
            let len = catalog.file_size;
            catalog.outbox.push_back(DiskOp::Truncate {
                file: FileId::Catalog,
                len,
            });
            catalog.outbox.push_back(DiskOp::Sync {
                file: FileId::Catalog,
            });
            catalog.repairs_left = 2;
        }
        Ok(catalog)
    }

    /// A live topic by name.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name)
    }

    /// A live topic by incarnation id.
    pub fn topic_by_id(&self, id: TopicId) -> Option<&TopicInfo> {
        self.names.get(&id).and_then(|name| self.topics.get(name))
    }

    /// Every live topic, by name.
    pub fn topics(&self) -> impl Iterator<Item = &TopicInfo> {
        self.topics.values()
    }

    /// The authority's answer to "is incarnation `id` gone for good?". A single node's catalogue
    /// is the authority and always caught up, so it can answer from its own state.
    pub fn confirm_gone(&self, id: TopicId) -> bool {
        !self.names.contains_key(&id) && id.0 < self.next_id
    }

    /// True when the file ends exactly at the last valid entry (nothing to cut first).
    pub fn is_repaired(&self) -> bool {
        self.repairs_left == 0 && !self.needs_repair
    }

    /// Cuts the file back to its last valid entry and syncs it.
    fn start_repair(&mut self) {
        let len = self.file_size;
        self.outbox.push_back(DiskOp::Truncate {
            file: FileId::Catalog,
            len,
        });
        self.outbox.push_back(DiskOp::Sync {
            file: FileId::Catalog,
        });
        self.repairs_left = 2;
        self.needs_repair = false;
    }

    /// True when no change is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_none()
    }

    /// Proposes a change; `waiter` comes back with the result from `on_io` (or from `pump` if it
    /// is rejected before being written).
    pub fn propose(&mut self, change: Change, waiter: W) {
        self.queue.push_back((change, waiter));
    }

    /// Starts writing the next queued change. Returns changes rejected by validation.
    pub fn pump(&mut self) -> Vec<(W, Result<Applied, ClientError>)> {
        let mut rejected = Vec::new();
        // A failed repair is retried when there is something to write (not in a loop).
        if self.needs_repair && self.repairs_left == 0 && !self.queue.is_empty() {
            self.start_repair();
        }
        while self.in_flight.is_none() && self.is_repaired() {
            let Some((change, waiter)) = self.queue.pop_front() else {
                break;
            };
            match self.entry_for(change) {
                Ok(entry) => self.write(entry, waiter),
                Err(error) => rejected.push((waiter, Err(error))),
            }
        }
        rejected
    }

    fn entry_for(&self, change: Change) -> Result<Entry, ClientError> {
        match change {
            Change::Create {
                name,
                partitions,
                retention_ms,
                now_ms,
            } => {
                validate_name(&name)?;
                let partitions = partitions.unwrap_or(DEFAULT_PARTITIONS);
                if !(1..=MAX_PARTITIONS).contains(&partitions) {
                    return Err(ClientError::BadRequest(format!(
                        "partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"
                    )));
                }
                if self.topics.contains_key(&name) {
                    return Err(ClientError::Conflict(format!(
                        "topic `{name}` already exists"
                    )));
                }
                let id = TopicId(self.next_id);
                Ok(Entry::Create(TopicInfo {
                    name,
                    id,
                    partitions,
                    retention_ms,
                    created_ms: now_ms,
                }))
            }
            Change::Delete { name } => match self.topics.get(&name) {
                Some(topic) => Ok(Entry::Delete { id: topic.id }),
                None => Err(ClientError::NotFound(format!("topic `{name}` not found"))),
            },
        }
    }

    fn write(&mut self, entry: Entry, waiter: W) {
        let mut data = Vec::new();
        put_frame(&mut data, &encode_entry(&entry));
        let mut ios_left = 2;
        let created = !self.file_exists;
        if created {
            self.outbox.push_back(DiskOp::Create {
                file: FileId::Catalog,
            });
            self.file_exists = true;
            ios_left += 1;
        }
        let offset = self.file_size;
        self.file_size += data.len() as u64;
        let data = Bytes::from(data);
        self.outbox.push_back(DiskOp::Write {
            file: FileId::Catalog,
            offset,
            data,
        });
        self.outbox.push_back(DiskOp::Sync {
            file: FileId::Catalog,
        });
        self.in_flight = Some(InFlight {
            entry,
            waiter,
            offset,
            created,
            ios_left,
            error: None,
        });
    }

    /// Handles a completion; returns the waiter and result once a change is decided.
    pub fn on_io(
        &mut self,
        result: Result<DiskDone, DiskError>,
    ) -> Option<(W, Result<Applied, ClientError>)> {
        if self.in_flight.is_none() {
            // A repair; if it failed, it is retried before the next write.
            self.repairs_left -= 1;
            self.needs_repair |= result.is_err();
            return None;
        }
        let in_flight = self.in_flight.as_mut().expect("checked above");
        if let Err(error) = result {
            in_flight.error.get_or_insert(error);
        }
        in_flight.ios_left -= 1;
        if in_flight.ios_left > 0 {
            return None;
        }
        let done = self.in_flight.take().expect("checked above");
        if let Some(error) = done.error {
            // Cut the failed entry away before anything else is written after it (a new file is
            // simply created again, which truncates it). Until the cut is durable a crash may
            // still keep the entry, so the answer is ambiguous, like any 5xx.
            self.file_size = done.offset;
            if done.created {
                self.file_exists = false;
            } else {
                self.needs_repair = true;
            }
            let message =
                format!("catalogue write failed ({error}); the change may not have been applied");
            return Some((done.waiter, Err(ClientError::Internal(message))));
        }
        Some((done.waiter, Ok(self.apply(done.entry))))
    }

    fn apply(&mut self, entry: Entry) -> Applied {
        match entry {
            Entry::Create(topic) => {
                self.next_id = self.next_id.max(topic.id.0 + 1);
                self.names.insert(topic.id, topic.name.clone());
                self.topics.insert(topic.name.clone(), topic.clone());
                Applied::Created(topic)
            }
            Entry::Delete { id } => {
                let name = self
                    .names
                    .remove(&id)
                    .expect("invariant: deletes name a live topic");
                Applied::Deleted(self.topics.remove(&name).expect("names and topics agree"))
            }
        }
    }

    /// Next disk operation to emit.
    pub fn poll_io(&mut self) -> Option<DiskOp> {
        self.outbox.pop_front()
    }
}

const TAG_CREATE: u8 = 1;
const TAG_DELETE: u8 = 2;

fn encode_entry(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::new();
    match entry {
        Entry::Create(topic) => {
            out.push(TAG_CREATE);
            out.extend_from_slice(&topic.id.0.to_le_bytes());
            out.extend_from_slice(&topic.partitions.to_le_bytes());
            out.extend_from_slice(&topic.retention_ms.unwrap_or(u64::MAX).to_le_bytes());
            out.extend_from_slice(&topic.created_ms.to_le_bytes());
            out.extend_from_slice(topic.name.as_bytes());
        }
        Entry::Delete { id } => {
            out.push(TAG_DELETE);
            out.extend_from_slice(&id.0.to_le_bytes());
        }
    }
    out
}

fn decode_entry(body: &[u8]) -> Option<Entry> {
    let mut reader = Reader::new(body);
    match reader.take(1)?[0] {
        TAG_CREATE => {
            let id = TopicId(reader.u64()?);
            let partitions = reader.u32()?;
            let retention_ms = Some(reader.u64()?).filter(|&ms| ms != u64::MAX);
            let created_ms = reader.u64()?;
            let name = std::str::from_utf8(reader.rest()).ok()?.to_string();
            Some(Entry::Create(TopicInfo {
                name,
                id,
                partitions,
                retention_ms,
                created_ms,
            }))
        }
        TAG_DELETE => Some(Entry::Delete {
            id: TopicId(reader.u64()?),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        catalog: &mut Catalog<u32>,
        file: &mut Vec<u8>,
    ) -> Vec<(u32, Result<Applied, ClientError>)> {
        let mut out = catalog.pump();
        while let Some(op) = catalog.poll_io() {
            if let DiskOp::Write { offset, data, .. } = &op {
                file.truncate(*offset as usize);
                file.extend_from_slice(data);
            }
            out.extend(catalog.on_io(Ok(DiskDone::Done)));
            out.extend(catalog.pump());
        }
        out
    }

    fn create(name: &str, partitions: Option<u32>) -> Change {
        Change::Create {
            name: name.into(),
            partitions,
            retention_ms: None,
            now_ms: 9,
        }
    }

    #[test]
    fn create_delete_recreate_gets_a_new_incarnation_and_survives_recovery() {
        let mut file = Vec::new();
        let mut catalog: Catalog<u32> = Catalog::recover(None).unwrap();
        catalog.propose(create("orders", Some(4)), 1);
        catalog.propose(create("orders", None), 2);
        catalog.propose(
            Change::Delete {
                name: "orders".into(),
            },
            3,
        );
        catalog.propose(create("orders", None), 4);
        let results = run(&mut catalog, &mut file);
        assert!(
            matches!(results[1], (2, Err(ClientError::Conflict(_)))),
            "{results:?}"
        );
        let first = catalog.topic("orders").unwrap().id;
        assert_eq!(first, TopicId(2));
        assert!(catalog.confirm_gone(TopicId(1)));
        assert!(!catalog.confirm_gone(TopicId(2)));
        assert!(
            !catalog.confirm_gone(TopicId(3)),
            "an id never issued is not confirmed gone"
        );

        let again: Catalog<u32> = Catalog::recover(Some(&Bytes::from(file))).unwrap();
        assert_eq!(again.topic("orders").unwrap().id, TopicId(2));
        assert_eq!(again.topic("orders").unwrap().partitions, 3);
        assert!(again.confirm_gone(TopicId(1)));
    }

    #[test]
    fn names_and_partition_counts_are_validated() {
        for bad in ["", ".", "..", "a/b", "sp ace", &"x".repeat(201)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name("a.b_c-D9").is_ok());
        let mut catalog: Catalog<u32> = Catalog::recover(None).unwrap();
        catalog.propose(create("t", Some(0)), 1);
        catalog.propose(create("t", Some(4097)), 2);
        let results = run(&mut catalog, &mut Vec::new());
        assert!(
            results
                .iter()
                .all(|(_, r)| matches!(r, Err(ClientError::BadRequest(_))))
        );
    }

    #[test]
    fn a_failed_write_is_cut_away_and_later_changes_still_land() {
        let mut file = Vec::new();
        let mut catalog: Catalog<u32> = Catalog::recover(None).unwrap();
        catalog.propose(create("a", None), 1);
        assert!(run(&mut catalog, &mut file)[0].1.is_ok());
        catalog.propose(create("b", None), 2);
        catalog.pump();
        let mut results = Vec::new();
        while let Some(op) = catalog.poll_io() {
            if let DiskOp::Write { offset, data, .. } = &op {
                file.truncate(*offset as usize);
                file.extend_from_slice(data);
            }
            let failed = matches!(op, DiskOp::Sync { .. });
            let result = if failed {
                Err(DiskError::Io("EIO".into()))
            } else {
                Ok(DiskDone::Done)
            };
            results.extend(catalog.on_io(result));
        }
        assert!(
            matches!(results[0], (2, Err(ClientError::Internal(_)))),
            "{results:?}"
        );
        assert!(catalog.topic("b").is_none());
        catalog.propose(create("c", None), 3);
        let ops_before_write = run_collecting(&mut catalog, &mut file);
        assert!(
            matches!(ops_before_write[0], DiskOp::Truncate { .. }),
            "{ops_before_write:?}"
        );
        let again: Catalog<u32> = Catalog::recover(Some(&Bytes::from(file))).unwrap();
        assert!(again.topic("a").is_some() && again.topic("c").is_some());
        assert!(again.topic("b").is_none(), "the failed entry was cut away");
    }

    fn run_collecting(catalog: &mut Catalog<u32>, file: &mut Vec<u8>) -> Vec<DiskOp> {
        let mut ops = Vec::new();
        catalog.pump();
        while let Some(op) = catalog.poll_io() {
            match &op {
                DiskOp::Write { offset, data, .. } => {
                    file.truncate(*offset as usize);
                    file.extend_from_slice(data);
                }
                DiskOp::Truncate { len, .. } => file.truncate(*len as usize),
                _ => {}
            }
            ops.push(op);
            catalog.on_io(Ok(DiskDone::Done));
            catalog.pump();
        }
        ops
    }
}
