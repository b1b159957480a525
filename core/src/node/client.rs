//! Client requests: topic administration through the metastore, produce through accept and
//! the WAL's group commit, consume by reading the committed part of a partition log (ours, or
//! the owner's through a forwarded read).

use super::cluster::{FORWARD_TIMEOUT_MS, Forwarded};
use super::parked::Waiter;
use super::{ConsumeAsker, IoPurpose, Node, PRODUCE_WAITERS_MAX, ProduceWaiter, STAGED_BYTES_MAX};
use crate::accept::partition_out_of_range;
use crate::access::Principal;
use crate::api::{
    ClientError, ClientOp, ClientReply, ConsumedRecord, MemberView, PartitionStats, ProduceMessage,
    TopicInfo,
};
use crate::constants::{
    MAX_CONSUME_BYTES, MAX_CONSUME_RECORDS, MAX_CONSUME_WAIT_MS, TOPIC_PAGE_MAX,
};
use crate::ids::{PartitionKey, RequestId};
use crate::io::{DiskDone, DiskError, DiskOp, NodeEvent};
use crate::meta::{MetaCommand, validate_change, validate_requested};
use crate::partition::{ReadDamage, ReadPlan, ReadRefusal};
use crate::peer::{PeerMessage, WireConsumed, WireError};
use crate::quota::Payer;
use crate::wal::Draft;

impl Node {
    pub(super) fn handle_client(&mut self, request: RequestId, op: ClientOp, who: &Principal) {
        if let Err(error) = self.authorize(who, &op) {
            self.counters.requests_refused_access += 1;
            return self.reply(request, ClientReply::Error(error));
        }
        match op {
            ClientOp::CreateTopic { name, partitions, retention_ms, retention_bytes, queue } => {
                let valid = validate_requested(retention_ms, retention_bytes)
                    .and_then(|()| queue.validate());
                if let Err(error) = valid {
                    return self.reply(request, ClientReply::Error(error));
                }
                let now_ms = self.now.as_millis();
                // What this replica has seen: the command may reach the log late (see there).
                let seen_next_id = self.meta.next_topic_id();
                let command = MetaCommand::CreateTopic {
                    name,
                    partitions,
                    retention_ms,
                    retention_bytes,
                    queue,
                    now_ms,
                    seen_next_id,
                };
                self.propose_admin(request, command, who);
            }
            ClientOp::UpdateTopic { name, change } => self.update_topic(request, name, change, who),
            ClientOp::DeleteTopic { name } => {
                // Bind the name to the incarnation this replica knows now: the command may reach
                // the log late (or twice), after the name was deleted and created again.
                let Some(id) = self.meta.topic(&name).map(|topic| topic.id) else {
                    let error = self.unknown_topic(&name);
                    return self.reply(request, ClientReply::Error(error));
                };
                self.propose_admin(request, MetaCommand::DeleteTopic { name, id }, who);
            }
            ClientOp::ListTopics { after, limit } => {
                let reply = self.topic_page(after.as_deref(), limit, who);
                self.reply(request, reply);
            }
            ClientOp::GetTopic { name, partition } => match self.topic_detail(&name, partition) {
                ClientReply::Topic(topic, stats) => self.gather_topic_stats(request, topic, stats),
                reply => self.reply(request, reply),
            },
            ClientOp::Produce { topic, messages, batch } => {
                self.produce(request, &topic, messages, batch, who);
            }
            ClientOp::Consume { topic, partition, offset, max, wait_ms } => {
                self.consume(request, &topic, partition, offset, (max, wait_ms), who);
            }
            ClientOp::Members => {
                let members = self.member_views();
                self.reply(request, ClientReply::Members(members));
            }
            ClientOp::Receive { topic, partition, max, wait_ms } => {
                self.receive(request, &topic, partition, (max, wait_ms), who);
            }
            ClientOp::Settle { topic, handles, action, batch } => {
                if !batch && handles.len() != 1 {
                    let error = ClientError::BadRequest("one receipt handle".into());
                    return self.reply(request, ClientReply::Error(error));
                }
                self.settle(request, &topic, &handles, action, who);
            }
            user_op => self.handle_user_op(request, user_op, who),
        }
    }

    /// Validates an update (400 before anything is proposed) and binds the name to the
    /// incarnation this replica knows now, like a delete: the command may reach the log late.
    fn update_topic(
        &mut self,
        request: RequestId,
        name: String,
        change: crate::api::TopicChange,
        who: &Principal,
    ) {
        if let Err(error) = validate_change(&change) {
            return self.reply(request, ClientReply::Error(error));
        }
        let Some(id) = self.meta.topic(&name).map(|topic| topic.id) else {
            let error = self.unknown_topic(&name);
            return self.reply(request, ClientReply::Error(error));
        };
        self.propose_admin(request, MetaCommand::UpdateTopic { name, id, change }, who);
    }

    /// A page of the topic list: the next `limit` names after `after` (at most `TOPIC_PAGE_MAX`),
    /// then those `who` may not see are left out. Cutting before filtering bounds a page's work
    /// by its limit, so a page may hold fewer topics than `limit`, even none, with more to come.
    fn topic_page(&self, after: Option<&str>, limit: u32, who: &Principal) -> ClientReply {
        let limit = limit.clamp(1, TOPIC_PAGE_MAX) as usize;
        let mut names = self.meta.topics_after(after);
        let page: Vec<&TopicInfo> = names.by_ref().take(limit).collect();
        let next = match (page.last(), names.next()) {
            (Some(last), Some(_)) => Some(last.name.clone()),
            _ => None,
        };
        let topics = page.into_iter().filter(|t| self.may_see(who, &t.name)).cloned().collect();
        ClientReply::Topics { topics, next }
    }

    fn topic_detail(&self, name: &str, partition: Option<u32>) -> ClientReply {
        let Some(topic) = self.meta.topic(name) else {
            return ClientReply::Error(self.unknown_topic(name));
        };
        let indexes = match partition {
            Some(p) if p >= topic.partitions => {
                return ClientReply::Error(partition_out_of_range(topic, p));
            }
            Some(p) => p..p + 1,
            None => 0..topic.partitions,
        };
        let stats = indexes
            .map(|index| {
                let key = PartitionKey { topic: topic.id, partition: index };
                let owner = self.meta.owner(key).map_or(0, |n| n.0);
                let local = owner == self.config.node_id.0;
                let numbers = local.then(|| self.numbers_of(key));
                PartitionStats { index, owner_node: owner, numbers }
            })
            .collect();
        ClientReply::Topic(topic.clone(), stats)
    }

    fn member_views(&self) -> Vec<MemberView> {
        let leader = self.meta.leader();
        self.meta
            .members()
            .into_iter()
            .map(|member| MemberView {
                id: member.id.0,
                role: match leader {
                    Some(leader) if leader == member.id => "leader".to_string(),
                    Some(_) if member.alive => "follower".to_string(),
                    _ => "unknown".to_string(),
                },
                http_addr: member.http_addr,
                cluster_addr: member.cluster_addr,
                alive: member.alive,
                partitions_owned: member.partitions_owned,
                last_heartbeat_ms: member.last_heartbeat_ms,
            })
            .collect()
    }

    fn produce(
        &mut self,
        request: RequestId,
        topic: &str,
        messages: Vec<ProduceMessage>,
        batch: bool,
        who: &Principal,
    ) {
        let waiter = ProduceWaiter::Client { request, records: messages.len() };
        // No quota, no payer: a user's name is not copied for nothing on every produce.
        let payer = (self.quota.bytes_per_sec() > 0).then(|| Payer::of(who));
        if let Err(error) = self.stage_messages(topic, messages, batch, waiter, payer) {
            self.counters.produce_requests_rejected += 1;
            if matches!(error, ClientError::QuotaExceeded { .. }) {
                self.counters.produce_requests_throttled += 1;
            }
            self.reply(request, ClientReply::Error(error));
        }
    }

    /// Validates `messages` for `topic` and stages them in the ingress WAL for `waiter`, charging
    /// `payer`'s produce quota (a client's produce; the node's own copies pay nothing).
    pub(super) fn stage_messages(
        &mut self,
        topic: &str,
        messages: Vec<ProduceMessage>,
        batch: bool,
        waiter: ProduceWaiter,
        payer: Option<Payer>,
    ) -> Result<(), ClientError> {
        if self.shutting_down {
            return Err(ClientError::ShuttingDown);
        }
        if let Some(error) = self.wal.latched() {
            return Err(ClientError::WalFailed(error.to_string()));
        }
        self.check_produce_room()?;
        let info = self.meta.topic(topic).ok_or_else(|| self.unknown_topic(topic))?;
        let drafts = self.resolver.resolve(info, messages, batch, self.now.as_millis())?;
        // The bulk lane's bound is for clients: a dead-letter copy is the node's own work.
        let client = matches!(waiter, ProduceWaiter::Client { .. });
        if client && !self.wal.admits(&drafts) {
            return Err(ClientError::Overloaded(format!(
                "{} bytes of large produces wait for the ingress WAL",
                self.wal.staged_bulk_bytes()
            )));
        }
        if let Some(payer) = payer {
            self.charge_quota(payer, &drafts)?;
        }
        self.wal.stage(drafts, waiter).map_err(|error| ClientError::WalFailed(error.to_string()))
    }

    /// Charges a valid produce that the WAL would take to its payer's quota, or refuses it. A
    /// produce that spends the quota says so (`NodeEvent::QuotaSpent`), so that a runtime can
    /// refuse the payer's next produces before it reads them.
    fn charge_quota(&mut self, payer: Payer, drafts: &[Draft]) -> Result<(), ClientError> {
        let bytes = drafts.iter().map(|d| d.payload.len() + d.key.as_ref().map_or(0, |k| k.len()));
        let bytes = bytes.sum::<usize>() as u64;
        match self.quota.admit(payer.clone(), bytes, self.now) {
            Ok(0) => Ok(()),
            Ok(wait_us) => {
                self.push_event(NodeEvent::QuotaSpent { payer, wait_us });
                Ok(())
            }
            Err(refusal) => {
                let who = match &payer {
                    Payer::Anonymous => "this node's clients".to_string(),
                    Payer::User(name) => format!("user `{name}`"),
                };
                let (rate, secs) = (refusal.bytes_per_sec, refusal.retry_after_secs());
                Err(ClientError::QuotaExceeded {
                    message: format!(
                        "produce quota of {rate} bytes/s for {who} spent; retry after {secs} s"
                    ),
                    retry_after_us: refusal.wait_us,
                })
            }
        }
    }

    /// A produce past the group commit's bounds is refused before it is staged.
    fn check_produce_room(&self) -> Result<(), ClientError> {
        let (waiters, staged) = (self.wal.produce_waiters(), self.wal.staged_bytes());
        if waiters >= PRODUCE_WAITERS_MAX || staged >= STAGED_BYTES_MAX {
            return Err(ClientError::Overloaded(format!(
                "{waiters} produces and {staged} bytes wait for the ingress WAL"
            )));
        }
        Ok(())
    }

    /// Answers the produces of a completed group commit.
    pub(super) fn answer_produces(
        &mut self,
        acked: Vec<ProduceWaiter>,
        failed: Vec<ProduceWaiter>,
        error: Option<&DiskError>,
    ) {
        for waiter in acked {
            match waiter {
                ProduceWaiter::Client { request, records } => {
                    self.counters.produce_requests_accepted += 1;
                    self.counters.records_accepted += records as u64;
                    self.reply(request, ClientReply::Produced { accepted: records });
                }
                ProduceWaiter::DeadLetter { key, offset } => {
                    self.on_dead_letter_staged(key, offset, true);
                }
            }
        }
        let reason = error.map_or_else(String::new, ToString::to_string);
        for waiter in failed {
            match waiter {
                ProduceWaiter::Client { request, .. } => {
                    self.counters.produce_requests_rejected += 1;
                    let reply = ClientReply::Error(ClientError::WalFailed(reason.clone()));
                    self.reply(request, reply);
                }
                ProduceWaiter::DeadLetter { key, offset } => {
                    self.on_dead_letter_staged(key, offset, false);
                }
            }
        }
    }

    /// A replay consume: `(max, wait_ms)` as in `ClientOp::Consume`.
    fn consume(
        &mut self,
        request: RequestId,
        topic: &str,
        partition: u32,
        offset: u64,
        (max, wait_ms): (u32, u64),
        who: &Principal,
    ) {
        let Some(info) = self.meta.topic(topic) else {
            let error = self.unknown_topic(topic);
            return self.reply(request, ClientReply::Error(error));
        };
        if partition >= info.partitions {
            let message = format!(
                "partition {partition} out of range: topic `{topic}` has {} partitions",
                info.partitions
            );
            return self.reply(request, ClientReply::Error(ClientError::BadRequest(message)));
        }
        let key = PartitionKey { topic: info.id, partition };
        match self.meta.owner(key) {
            Some(owner) if owner == self.config.node_id => {
                self.read_local(request, key, offset, max, topic.to_string(), wait_ms);
            }
            Some(owner) if self.meta.is_alive(owner) => {
                let kind = Forwarded::Consume { request, topic: topic.to_string(), partition };
                // The owner may hold it for the whole wait: our deadline is past it.
                let wait_ms = if self.shutting_down { 0 } else { wait_ms.min(MAX_CONSUME_WAIT_MS) };
                let timeout = FORWARD_TIMEOUT_MS + wait_ms;
                self.forward_with_timeout(owner, kind, timeout, |id| PeerMessage::Consume {
                    id,
                    who: who.clone(),
                    target: key,
                    offset,
                    max,
                    wait_ms,
                });
            }
            owner => {
                let who = owner.map_or_else(|| "unknown".into(), |n| format!("node {}", n.0));
                let error = ClientError::Unavailable(format!(
                    "the owner of this partition ({who}) is down"
                ));
                self.reply(request, ClientReply::Error(error));
            }
        }
    }

    pub(super) fn read_local(
        &mut self,
        request: RequestId,
        key: PartitionKey,
        offset: u64,
        max: u32,
        topic: String,
        wait_ms: u64,
    ) {
        let log = self.partitions.get(&key);
        if let Some(refusal) = log.and_then(|log| log.refuse_read(offset)) {
            return self.reply(request, ClientReply::Error(read_refusal_error(refusal)));
        }
        let wanted = u64::from(max.clamp(1, MAX_CONSUME_RECORDS));
        let plan = log.and_then(|log| log.read_plan(offset, wanted, MAX_CONSUME_BYTES));
        let Some(plan) = plan else {
            let waiter = Waiter::Client { request, topic, key, offset, max };
            return self.park_or_answer_empty(waiter, wait_ms);
        };
        let op = DiskOp::Read { file: plan.file, offset: plan.pos, len: plan.len };
        let asker = ConsumeAsker::Client { request, topic };
        self.emit(IoPurpose::Consume { key, plan, asker }, op);
    }

    /// A partition read completed: answer the local client or the peer that asked.
    pub(super) fn answer_consume(
        &mut self,
        key: PartitionKey,
        plan: ReadPlan,
        asker: ConsumeAsker,
        result: Result<DiskDone, DiskError>,
    ) {
        let decoded = self.decode_consume(key, plan, result);
        match asker {
            ConsumeAsker::Client { request, topic } => {
                let reply = match decoded {
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
                    Err(error) => ClientReply::Error(error),
                };
                self.reply(request, reply);
            }
            ConsumeAsker::Peer { from, id } => {
                let result = decoded
                    .map(|records| records.into_iter().map(wire_record).collect())
                    .map_err(|error| WireError::from_client(&error));
                self.send(from, &PeerMessage::ConsumeReply { id, result });
            }
        }
    }

    pub(super) fn decode_consume(
        &mut self,
        key: PartitionKey,
        plan: ReadPlan,
        result: Result<DiskDone, DiskError>,
    ) -> Result<Vec<crate::partition::PartitionRecord>, ClientError> {
        let Some(log) = self.partitions.get(&key) else {
            return Err(ClientError::NotFound("topic not found".into()));
        };
        match result {
            Err(error) => Err(ClientError::Internal(format!("read failed: {error}"))),
            Ok(DiskDone::Done) => Err(ClientError::Internal("read returned no data".into())),
            Ok(DiskDone::Data(bytes)) => {
                let decoded = log.decode_read(plan, &bytes);
                decoded.map_err(|damage| self.read_damaged(damage))
            }
        }
    }

    /// A read found a damaged record: loud in the log and the counters, a 500 naming the
    /// partition and offset for the client; nothing from it is served.
    fn read_damaged(&mut self, damage: ReadDamage) -> ClientError {
        let file = damage.file.relative_path();
        tracing::error!(%damage, file, byte = damage.byte, "a read found a DAMAGED record at rest; nothing from it is served");
        self.counters.partition_read_damaged += 1;
        ClientError::Internal(format!("{damage}; nothing from it is served"))
    }
}

impl Node {
    /// A topic this replica does not know: 404 only if the replica has caught up with the
    /// leader; otherwise the topic may exist and we cannot tell yet (503, retry).
    pub(super) fn unknown_topic(&self, topic: &str) -> ClientError {
        if self.meta.caught_up() {
            not_found(topic)
        } else {
            ClientError::Unavailable(format!(
                "topic `{topic}` is unknown to this node's metastore replica, which has not caught \
                 up with the leader yet; retry"
            ))
        }
    }
}

fn not_found(topic: &str) -> ClientError {
    ClientError::NotFound(format!("topic `{topic}` not found"))
}

/// A record read from a partition log as it crosses the wire (or waits in a read-ahead).
pub(super) fn wire_record(record: crate::partition::PartitionRecord) -> WireConsumed {
    WireConsumed {
        offset: record.offset,
        timestamp_ms: record.timestamp_ms,
        key: record.key,
        payload: record.payload,
    }
}

/// What a client is told for a read its partition log refuses.
pub(super) fn read_refusal_error(refusal: ReadRefusal) -> ClientError {
    match refusal {
        ReadRefusal::Gone { log_start_offset } => ClientError::Gone { log_start_offset },
        ReadRefusal::BeingTrimmed => {
            ClientError::Unavailable("these records are being deleted by retention; retry".into())
        }
    }
}
