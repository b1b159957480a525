//! Client requests: topic administration through the catalogue, produce through accept and the
//! WAL's group commit, consume through a read of the committed part of a partition log.

use super::{IoPurpose, Node, ProduceWaiter};
use crate::api::{
    ClientError, ClientOp, ClientReply, ConsumedRecord, PartitionStats, ProduceMessage,
};
use crate::catalog::{Applied, Change};
use crate::constants::{MAX_CONSUME_BYTES, MAX_CONSUME_RECORDS};
use crate::ids::{PartitionKey, RequestId};
use crate::io::{DiskDone, DiskError, DiskOp, FileId};
use crate::partition::{PartitionLog, ReadPlan};

impl Node {
    pub(super) fn handle_client(&mut self, request: RequestId, op: ClientOp) {
        match op {
            ClientOp::CreateTopic {
                name,
                partitions,
                retention_ms,
            } => {
                let now_ms = self.now.as_millis();
                let change = Change::Create {
                    name,
                    partitions,
                    retention_ms,
                    now_ms,
                };
                self.catalog.propose(change, request);
            }
            ClientOp::DeleteTopic { name } => {
                self.catalog.propose(Change::Delete { name }, request)
            }
            ClientOp::ListTopics => {
                let topics = self.catalog.topics().cloned().collect();
                self.reply(request, ClientReply::Topics(topics));
            }
            ClientOp::GetTopic { name } => {
                let reply = self.topic_detail(&name);
                self.reply(request, reply);
            }
            ClientOp::Produce {
                topic,
                messages,
                batch,
            } => {
                self.produce(request, &topic, messages, batch);
            }
            ClientOp::Consume {
                topic,
                partition,
                offset,
                max,
            } => {
                self.consume(request, &topic, partition, offset, max);
            }
            ClientOp::Stats => {
                let stats = Box::new(self.stats());
                self.reply(request, ClientReply::Stats(stats));
            }
        }
    }

    fn topic_detail(&self, name: &str) -> ClientReply {
        let Some(topic) = self.catalog.topic(name) else {
            return ClientReply::Error(not_found(name));
        };
        let stats = (0..topic.partitions)
            .map(|index| {
                let log = self.partitions.get(&PartitionKey {
                    topic: topic.id,
                    partition: index,
                });
                PartitionStats {
                    index,
                    owner_node: self.config.node_id.0,
                    high_watermark: log.map_or(0, PartitionLog::high_watermark),
                    size_bytes: log.map_or(0, PartitionLog::size_bytes),
                }
            })
            .collect();
        ClientReply::Topic(topic.clone(), stats)
    }

    /// Answers a decided catalogue change and cleans up after a deletion.
    pub(super) fn reply_catalog(
        &mut self,
        request: RequestId,
        result: Result<Applied, ClientError>,
    ) {
        let reply = match result {
            Ok(Applied::Created(topic)) => {
                tracing::info!(topic = %topic.name, id = topic.id.0, partitions = topic.partitions, "topic created");
                ClientReply::TopicCreated(topic)
            }
            Ok(Applied::Deleted(topic)) => {
                tracing::info!(topic = %topic.name, id = topic.id.0, "topic deleted");
                self.drop_partitions(topic.id, topic.partitions);
                ClientReply::TopicDeleted
            }
            Err(error) => ClientReply::Error(error),
        };
        self.reply(request, reply);
    }

    /// Forgets the partition logs of a deleted incarnation and deletes their files. Commits in
    /// flight to them end as `TopicGone` (their records are discarded after confirmation).
    fn drop_partitions(&mut self, topic: crate::ids::TopicId, partitions: u32) {
        self.abandon_jobs_of(topic);
        for partition in 0..partitions {
            let key = PartitionKey { topic, partition };
            if self.partitions.remove(&key).is_some() {
                let file = FileId::PartitionLog(key);
                self.emit(IoPurpose::FileDelete, DiskOp::Delete { file });
            }
        }
    }

    fn produce(
        &mut self,
        request: RequestId,
        topic: &str,
        messages: Vec<ProduceMessage>,
        batch: bool,
    ) {
        match self.stage_produce(request, topic, messages, batch) {
            Ok(()) => {}
            Err(error) => {
                self.counters.produce_requests_rejected += 1;
                self.reply(request, ClientReply::Error(error));
            }
        }
    }

    fn stage_produce(
        &mut self,
        request: RequestId,
        topic: &str,
        messages: Vec<ProduceMessage>,
        batch: bool,
    ) -> Result<(), ClientError> {
        if self.shutting_down {
            return Err(ClientError::ShuttingDown);
        }
        if let Some(error) = self.wal.latched() {
            return Err(ClientError::WalFailed(error.to_string()));
        }
        let info = self.catalog.topic(topic).ok_or_else(|| not_found(topic))?;
        let drafts = self
            .resolver
            .resolve(info, messages, batch, self.now.as_millis())?;
        let waiter = ProduceWaiter {
            request,
            records: drafts.len(),
        };
        self.wal
            .stage(drafts, waiter)
            .map_err(|error| ClientError::WalFailed(error.to_string()))
    }

    /// Answers the produces of a completed group commit.
    pub(super) fn answer_produces(
        &mut self,
        acked: Vec<ProduceWaiter>,
        failed: Vec<ProduceWaiter>,
        error: Option<&DiskError>,
    ) {
        for waiter in acked {
            self.counters.produce_requests_accepted += 1;
            self.counters.records_accepted += waiter.records as u64;
            self.reply(
                waiter.request,
                ClientReply::Produced {
                    accepted: waiter.records,
                },
            );
        }
        let reason = error.map_or_else(String::new, ToString::to_string);
        for waiter in failed {
            self.counters.produce_requests_rejected += 1;
            let reply = ClientReply::Error(ClientError::WalFailed(reason.clone()));
            self.reply(waiter.request, reply);
        }
    }

    fn consume(&mut self, request: RequestId, topic: &str, partition: u32, offset: u64, max: u32) {
        let Some(info) = self.catalog.topic(topic) else {
            return self.reply(request, ClientReply::Error(not_found(topic)));
        };
        if partition >= info.partitions {
            let message = format!(
                "partition {partition} out of range: topic `{topic}` has {} partitions",
                info.partitions
            );
            return self.reply(
                request,
                ClientReply::Error(ClientError::BadRequest(message)),
            );
        }
        let key = PartitionKey {
            topic: info.id,
            partition,
        };
        let max = u64::from(max.clamp(1, MAX_CONSUME_RECORDS));
        let plan = self
            .partitions
            .get(&key)
            .and_then(|log| log.read_plan(offset, max, MAX_CONSUME_BYTES));
        let Some(plan) = plan else {
            return self.reply(request, ClientReply::Records(Vec::new()));
        };
        let op = DiskOp::Read {
            file: FileId::PartitionLog(key),
            offset: plan.pos,
            len: plan.len,
        };
        let topic = topic.to_string();
        self.emit(
            IoPurpose::Consume {
                request,
                key,
                plan,
                topic,
            },
            op,
        );
    }

    /// Answers a consume whose read completed.
    pub(super) fn answer_consume(
        &mut self,
        request: RequestId,
        key: PartitionKey,
        plan: ReadPlan,
        topic: String,
        result: Result<DiskDone, DiskError>,
    ) {
        let reply = match (self.partitions.get(&key), result) {
            (None, _) => ClientReply::Error(not_found(&topic)),
            (Some(_), Err(error)) => {
                ClientReply::Error(ClientError::Internal(format!("read failed: {error}")))
            }
            (Some(_), Ok(DiskDone::Done)) => {
                ClientReply::Error(ClientError::Internal("read returned no data".into()))
            }
            (Some(log), Ok(DiskDone::Data(bytes))) => match log.decode_read(plan, &bytes) {
                Ok(records) => ClientReply::Records(
                    records
                        .into_iter()
                        .map(|r| ConsumedRecord {
                            topic: topic.clone(),
                            partition: key.partition,
                            offset: r.offset,
                            key: r.key,
                            payload: r.payload,
                            timestamp_ms: r.timestamp_ms,
                        })
                        .collect(),
                ),
                Err(error) => {
                    tracing::error!(%error, "consume found a damaged record");
                    ClientReply::Error(ClientError::Internal(error))
                }
            },
        };
        self.reply(request, reply);
    }
}

fn not_found(topic: &str) -> ClientError {
    ClientError::NotFound(format!("topic `{topic}` not found"))
}
