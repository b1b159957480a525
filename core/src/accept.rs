//! Accept-time validation and partition resolution of a produce. Resolution is a pure function
//! of the local catalogue: an explicit partition wins, then `fnv1a_32(key) % partitions`, then a
//! per-topic round-robin that starts at a seeded random partition on each node. No liveness check
//! here: the dispatcher deals with dead owners later, so an accept costs one local fsync.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::api::{ClientError, ProduceMessage, TopicInfo};
use crate::constants::{MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_KEY_BYTES, MAX_MESSAGE_BYTES};
use crate::fnv::fnv1a_32;
use crate::ids::TopicId;
use crate::wal::Draft;

/// Per-topic round-robin state for keyless records.
pub struct Resolver {
    rng: ChaCha8Rng,
    next_keyless: BTreeMap<TopicId, u32>,
}

impl Resolver {
    /// A resolver drawing its random starting partitions from `seed`.
    pub fn new(seed: u64) -> Resolver {
        Resolver { rng: ChaCha8Rng::seed_from_u64(seed), next_keyless: BTreeMap::new() }
    }

    /// Validates every message of a produce (all or nothing) and resolves their partitions.
    pub fn resolve(
        &mut self,
        topic: &TopicInfo,
        messages: Vec<ProduceMessage>,
        batch: bool,
        now_ms: u64,
    ) -> Result<Vec<Draft>, ClientError> {
        check_shape(&messages, batch)?;
        for (index, message) in messages.iter().enumerate() {
            check_message(topic, message).map_err(|error| prefix(error, batch, index))?;
        }
        let drafts = messages
            .into_iter()
            .map(|message| Draft {
                timestamp_ms: now_ms,
                topic: topic.name.clone(),
                topic_id: topic.id,
                partition: self.partition_for(topic, &message),
                key: message.key,
                payload: message.payload,
            })
            .collect();
        Ok(drafts)
    }

    fn partition_for(&mut self, topic: &TopicInfo, message: &ProduceMessage) -> u32 {
        if let Some(partition) = message.partition {
            return partition;
        }
        if let Some(key) = &message.key {
            return fnv1a_32(key) % topic.partitions;
        }
        let rng = &mut self.rng;
        let next = self
            .next_keyless
            .entry(topic.id)
            .or_insert_with(|| rng.random_range(0..topic.partitions));
        let partition = *next % topic.partitions;
        *next = (partition + 1) % topic.partitions;
        partition
    }
}

fn check_shape(messages: &[ProduceMessage], batch: bool) -> Result<(), ClientError> {
    if messages.is_empty() {
        return Err(ClientError::BadRequest("a batch needs at least one message".into()));
    }
    if batch && messages.len() > MAX_BATCH_MESSAGES {
        return Err(ClientError::BadRequest(format!(
            "a batch holds at most {MAX_BATCH_MESSAGES} messages, got {}",
            messages.len()
        )));
    }
    let total: usize = messages.iter().map(|m| m.payload.len()).sum();
    if batch && total > MAX_BATCH_BYTES {
        return Err(ClientError::TooLarge(format!(
            "batch payloads total {total} bytes, more than {MAX_BATCH_BYTES}"
        )));
    }
    Ok(())
}

/// The size limits every record obeys, whoever sent it: a client's produce, or a peer's commit
/// batch (a record past them would not fit a partition frame).
pub fn check_record_limits(payload: &[u8], key: Option<&[u8]>) -> Result<(), ClientError> {
    if payload.is_empty() {
        return Err(ClientError::BadRequest(
            "empty payload: a message needs at least 1 byte".into(),
        ));
    }
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(ClientError::TooLarge(format!(
            "payload of {} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit",
            payload.len()
        )));
    }
    if key.is_some_and(|key| key.len() > MAX_KEY_BYTES) {
        return Err(ClientError::BadRequest(format!(
            "key longer than the {MAX_KEY_BYTES}-byte limit"
        )));
    }
    Ok(())
}

fn check_message(topic: &TopicInfo, message: &ProduceMessage) -> Result<(), ClientError> {
    check_record_limits(&message.payload, message.key.as_deref())?;
    if let Some(partition) = message.partition
        && partition >= topic.partitions
    {
        return Err(partition_out_of_range(topic, partition));
    }
    Ok(())
}

/// The 400 for a partition the topic does not have.
pub fn partition_out_of_range(topic: &TopicInfo, partition: u32) -> ClientError {
    ClientError::BadRequest(format!(
        "partition {partition} out of range: topic `{}` has {} partitions (0-{})",
        topic.name,
        topic.partitions,
        topic.partitions - 1
    ))
}

fn prefix(error: ClientError, batch: bool, index: usize) -> ClientError {
    if !batch {
        return error;
    }
    match error {
        ClientError::BadRequest(m) => ClientError::BadRequest(format!("message {index}: {m}")),
        ClientError::TooLarge(m) => ClientError::TooLarge(format!("message {index}: {m}")),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn topic(partitions: u32) -> TopicInfo {
        TopicInfo {
            name: "t".into(),
            id: TopicId(1),
            partitions,
            retention_ms: None,
            retention_bytes: None,
            created_ms: 0,
            queue: Default::default(),
        }
    }

    fn msg(key: Option<&str>, partition: Option<u32>, payload: &[u8]) -> ProduceMessage {
        ProduceMessage {
            key: key.map(|k| Bytes::from(k.to_string())),
            partition,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn explicit_partition_wins_then_key_then_round_robin() {
        let mut resolver = Resolver::new(7);
        let t = topic(4);
        let drafts = resolver
            .resolve(&t, vec![msg(Some("k"), Some(2), b"x"), msg(Some("k"), None, b"x")], true, 0)
            .unwrap();
        assert_eq!(drafts[0].partition, 2);
        assert_eq!(drafts[1].partition, fnv1a_32(b"k") % 4);
        let keyless: Vec<u32> = (0..8)
            .map(|_| {
                resolver.resolve(&t, vec![msg(None, None, b"x")], false, 0).unwrap()[0].partition
            })
            .collect();
        for pair in keyless.windows(2) {
            assert_eq!(pair[1], (pair[0] + 1) % 4, "keyless records rotate: {keyless:?}");
        }
    }

    #[test]
    fn one_bad_message_rejects_the_whole_batch_naming_it() {
        let mut resolver = Resolver::new(1);
        let messages = vec![msg(None, None, b"ok"), msg(None, Some(99), b"bad")];
        let error = resolver.resolve(&topic(4), messages, true, 0).unwrap_err();
        assert!(
            matches!(&error, ClientError::BadRequest(m) if m.starts_with("message 1:")),
            "{error}"
        );
        let error = resolver.resolve(&topic(4), vec![msg(None, None, b"")], false, 0).unwrap_err();
        assert_eq!(error.http_status(), 400);
        let big = vec![0u8; MAX_MESSAGE_BYTES + 1];
        let error = resolver.resolve(&topic(4), vec![msg(None, None, &big)], false, 0).unwrap_err();
        assert_eq!(error.http_status(), 413);
        let many = (0..1001).map(|_| msg(None, None, b"x")).collect();
        assert_eq!(resolver.resolve(&topic(4), many, true, 0).unwrap_err().http_status(), 400);
    }
}
