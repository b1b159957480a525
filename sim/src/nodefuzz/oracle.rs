//! The invariants' bookkeeping: which client requests await an answer (each is answered exactly
//! once, unless a crash drops it), which records were acknowledged (202) and on which topic
//! incarnation, and every record content a client or the fake peer ever sent (a consumer may
//! only ever read one of those). A violation panics with a message naming the invariant.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use narad_core::{ClientOp, ClientReply, ConsumedRecord, RequestId, TopicId};

use crate::checker::{PageAsked, page_fault};

/// A record a client was told is durable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Acked {
    /// The incarnation the topic name resolved to when the produce was accepted.
    pub topic: TopicId,
    pub key: Option<Bytes>,
    pub payload: Bytes,
}

/// What an outstanding request is.
#[derive(Debug)]
enum Waiting {
    /// A `ListTopics` sent just before a produce: tells the incarnation the produce resolves to.
    Probe { topic: String },
    /// A produce; `probe` is the `ListTopics` sent right before it.
    Produce { probe: RequestId, messages: Vec<(Option<Bytes>, Bytes)> },
    /// A consume from `offset`.
    Consume { offset: u64 },
    /// A page of the topic list (the harness is trusted: it sees every topic).
    Page(PageAsked),
    /// A request the harness itself reads the answer of (final reads).
    Harness,
    /// Any other request: only answered-exactly-once is checked.
    Other,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Oracle {
    waiting: BTreeMap<RequestId, Waiting>,
    /// Answered probes: the incarnation their topic name had, if any.
    probes: BTreeMap<RequestId, Option<TopicId>>,
    /// Answers to harness requests, until taken.
    answers: BTreeMap<RequestId, ClientReply>,
    /// Every acknowledged record, in acknowledgement order.
    pub acked: Vec<Acked>,
    /// Hashes of every (key, payload) ever sent.
    sent: HashSet<u64>,
    /// Topic incarnations seen in any reply.
    pub topics_seen: Vec<TopicId>,
    /// Requests dropped unanswered by a crash.
    pub dropped: usize,
}

impl Oracle {
    /// `op` was sent as `request`: remember what its answer must satisfy.
    pub fn sent(&mut self, request: RequestId, op: &ClientOp, probe: Option<RequestId>) {
        let waiting = match op {
            ClientOp::Produce { messages, .. } => {
                for m in messages {
                    self.record_sent(m.key.as_deref(), &m.payload);
                }
                let messages = messages.iter().map(|m| (m.key.clone(), m.payload.clone()));
                let probe = probe.expect("invariant: every produce is probed");
                Waiting::Produce { probe, messages: messages.collect() }
            }
            ClientOp::Consume { offset, .. } => Waiting::Consume { offset: *offset },
            ClientOp::ListTopics { after, limit } => {
                Waiting::Page(PageAsked { after: after.clone(), limit: *limit, sees_all: true })
            }
            _ => Waiting::Other,
        };
        self.insert(request, waiting);
    }

    /// A probe (`ListTopics`) for `topic` was sent as `request`.
    pub fn sent_probe(&mut self, request: RequestId, topic: &str) {
        self.insert(request, Waiting::Probe { topic: topic.to_string() });
    }

    /// A request whose answer the harness takes with `take_answer`.
    pub fn sent_harness(&mut self, request: RequestId) {
        self.insert(request, Waiting::Harness);
    }

    fn insert(&mut self, request: RequestId, waiting: Waiting) {
        let old = self.waiting.insert(request, waiting);
        assert!(old.is_none(), "harness bug: request id {} reused", request.0);
    }

    /// A record content the fake peer sent in a commit batch.
    pub fn record_sent(&mut self, key: Option<&[u8]>, payload: &[u8]) {
        self.sent.insert(content_hash(key, payload));
    }

    /// The answer of a harness request, once it came.
    pub fn take_answer(&mut self, request: RequestId) -> Option<ClientReply> {
        self.answers.remove(&request)
    }

    /// Requests still waiting for an answer.
    pub fn outstanding(&self) -> usize {
        self.waiting.len()
    }

    /// The node crashed: what it had not answered is never answered (the connection is gone).
    pub fn crashed(&mut self) {
        self.dropped += self.waiting.len();
        self.waiting.clear();
    }

    /// The node answered `request` with `reply`.
    pub fn reply(&mut self, request: RequestId, reply: ClientReply) {
        let Some(waiting) = self.waiting.remove(&request) else {
            panic!(
                "INVARIANT answered-once: request {} answered again or never asked: {reply:?}",
                request.0
            );
        };
        self.note_topics(&reply);
        match waiting {
            Waiting::Probe { topic } => {
                let id = match &reply {
                    ClientReply::Topics { topics, .. } => {
                        topics.iter().find(|t| t.name == topic).map(|t| t.id)
                    }
                    other => panic!("INVARIANT reply-shape: ListTopics answered {other:?}"),
                };
                self.probes.insert(request, id);
            }
            Waiting::Produce { probe, messages } => {
                self.produce_answered(request, probe, messages, &reply)
            }
            Waiting::Consume { offset } => self.consume_answered(request, offset, &reply),
            Waiting::Page(asked) => match &reply {
                ClientReply::Topics { topics, next } => {
                    if let Some(fault) = page_fault(&asked, topics, next.as_deref()) {
                        panic!("INVARIANT topic-page: {fault}");
                    }
                }
                other => panic!("INVARIANT reply-shape: ListTopics answered {other:?}"),
            },
            Waiting::Harness => {
                self.answers.insert(request, reply);
            }
            Waiting::Other => {}
        }
    }

    fn note_topics(&mut self, reply: &ClientReply) {
        let ids: Vec<TopicId> = match reply {
            ClientReply::TopicCreated(t) | ClientReply::Topic(t, _) => vec![t.id],
            ClientReply::Topics { topics, .. } => topics.iter().map(|t| t.id).collect(),
            _ => return,
        };
        for id in ids {
            if !self.topics_seen.contains(&id) {
                self.topics_seen.push(id);
            }
        }
    }

    fn produce_answered(
        &mut self,
        request: RequestId,
        probe: RequestId,
        messages: Vec<(Option<Bytes>, Bytes)>,
        reply: &ClientReply,
    ) {
        let ClientReply::Produced { accepted } = reply else {
            return; // an error: ambiguous (WalFailed) or nothing accepted
        };
        assert_eq!(
            *accepted,
            messages.len(),
            "INVARIANT produce-count: request {} sent {} messages, 202 says {accepted}",
            request.0,
            messages.len()
        );
        let topic = match self.probes.remove(&probe) {
            Some(Some(topic)) => topic,
            Some(None) => panic!(
                "INVARIANT produce-topic: request {} got 202 for a topic the node listed as absent \
                 an instant before",
                request.0
            ),
            None => panic!(
                "INVARIANT answered-once: produce {} answered 202 before the ListTopics sent \
                 just before it",
                request.0
            ),
        };
        let acked = messages.into_iter().map(|(key, payload)| Acked { topic, key, payload });
        self.acked.extend(acked);
    }

    fn consume_answered(&mut self, request: RequestId, offset: u64, reply: &ClientReply) {
        let ClientReply::Records(records) = reply else {
            return;
        };
        self.check_records(request, offset, records);
    }

    /// Records read from `offset`: dense offsets from there, and only contents ever sent.
    pub fn check_records(&self, request: RequestId, offset: u64, records: &[ConsumedRecord]) {
        for (i, record) in records.iter().enumerate() {
            let expected = offset.checked_add(i as u64);
            assert_eq!(
                Some(record.offset),
                expected,
                "INVARIANT consume-offsets: request {} from offset {offset}: record {i} has offset \
                 {}",
                request.0,
                record.offset
            );
            let hash = content_hash(record.key.as_deref(), &record.payload);
            assert!(
                self.sent.contains(&hash),
                "INVARIANT no-invented-data: request {} read {}/p{} offset {}: a record nobody \
                 sent ({} payload bytes, key {:?})",
                request.0,
                record.topic,
                record.partition,
                record.offset,
                record.payload.len(),
                record.key.as_ref().map(Bytes::len)
            );
        }
    }
}

fn content_hash(key: Option<&[u8]>, payload: &[u8]) -> u64 {
    // CRC-32 of each part (SIMD-fast; SipHash over megabytes showed up in profiles), with the
    // key's presence and the payload's length.
    let key_part = key.map_or(0, |k| u64::from(crc32fast::hash(k)) | 1 << 32);
    let payload_part = u64::from(crc32fast::hash(payload)) ^ (payload.len() as u64).rotate_left(32);
    key_part.rotate_left(17) ^ payload_part
}
