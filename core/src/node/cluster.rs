//! Talking to other nodes: decoding what peers send and routing it, and the bookkeeping of our
//! own requests to peers (commits to remote owners, commands forwarded to the metastore
//! leader, consumes forwarded to owners) with their timeouts. Every request to a peer has a
//! deadline; a lost message or a dead peer ends as a timeout, never as a hang.

use std::collections::BTreeMap;

use super::{ConsumeAsker, IoPurpose, MetaWaiter, Node, PEER_COMMIT_JOBS_MAX, PEER_REQUESTS_MAX};
use crate::accept::check_record_limits;
use crate::access::{UserId, UserInfo};
use crate::api::{ClientError, ClientReply, ConsumedRecord, PartitionNumbers};
use crate::constants::{COMMIT_TIMEOUT_MS, MAX_CONSUME_BYTES, MAX_CONSUME_RECORDS};
use crate::dispatch::CommitResult;
use crate::ids::{Instant, NodeId, PartitionKey, RequestId, TopicId};
use crate::io::DiskOp;
use crate::meta::users::UserCommand;
use crate::meta::{MetaCommand, decode_command};
use crate::partition::{CommitId, PartitionRecord};
use crate::peer::{
    PeerMessage, WireAdminResult, WireCommitResult, WireConsumed, WireError, WireRecord,
};

use super::owner::ReplyTo;
use super::parked::Waiter;

/// How long a forwarded command or consume may take before the client gets a 503.
pub(super) const FORWARD_TIMEOUT_MS: u64 = 6_000;
/// How long `GET /v1/topics/{t}` waits for other owners' statistics.
const STATS_TIMEOUT_MS: u64 = 2_000;

/// A client request forwarded to another node.
#[derive(Clone, Debug)]
pub(super) enum Forwarded {
    /// A topic command sent to the metastore leader; `settle`: what our replica must show
    /// before its answer goes out.
    Admin { request: RequestId, settle: Settle },
    /// Our membership heartbeat sent to the leader (nobody waits).
    Heartbeat,
    /// A consume sent to the partition's owner.
    Consume { request: RequestId, topic: String, partition: u32 },
    /// A discard confirmation asked of the leader.
    Confirm,
    /// One partition of a client's queue receive, asked of its owner.
    Receive { pending: u64 },
    /// The handles `slots` of a settle, sent to their owner.
    Settle { batch: u64, slots: Vec<usize> },
}

/// Our outstanding requests to peers.
#[derive(Default)]
pub(super) struct Remote {
    next_id: u64,
    /// Commits sent to owners, by the dispatcher's commit id: the owner and the deadline.
    pub(super) commits: BTreeMap<CommitId, (NodeId, Instant)>,
    /// Requests forwarded to peers, by message id: what, to whom, until when.
    pub(super) forwards: BTreeMap<u64, (Forwarded, NodeId, Instant)>,
    /// Forwarded topic commands already decided by the leader, waiting until our own replica
    /// has applied them too (read-your-writes), or until the deadline.
    pub(super) settling: Vec<Settling>,
    /// `GET /v1/topics/{t}` answers waiting for other owners' partition statistics.
    pub(super) topic_stats: BTreeMap<u64, PendingTopicStats>,
}

/// A topic's statistics being gathered from the partitions' owners.
pub(super) struct PendingTopicStats {
    pub request: RequestId,
    pub topic: crate::api::TopicInfo,
    pub stats: Vec<crate::api::PartitionStats>,
    pub waiting: std::collections::BTreeSet<NodeId>,
    pub deadline: Instant,
}

/// A topic command's answer held back until the local replica shows its effect.
pub(super) struct Settling {
    pub request: RequestId,
    pub reply: ClientReply,
    pub until: Settle,
    pub deadline: Instant,
}

/// The effect of a topic command as our own replica will show it.
#[derive(Clone, Debug)]
pub(super) enum Settle {
    /// A created topic: its name is present.
    Present(String),
    /// A deleted incarnation: it is absent (by id: the name may already hold a new one).
    Absent(TopicId),
    /// An update of incarnation `id` was proposed (the leader's answer says to what).
    Updated(TopicId),
    /// An updated incarnation: it shows the answered retention, or it is gone since.
    Shows(crate::api::TopicInfo),
    /// A created user: its name is present.
    UserPresent(String),
    /// A deleted user incarnation: it is absent.
    UserAbsent(String, UserId),
    /// A change of a user incarnation was proposed (replaced by `UserShows` once answered).
    UserChange(String, UserId),
    /// A changed user incarnation: it shows the answered change (or is gone since).
    UserShows(UserInfo),
}

impl Settle {
    /// What the effect of a client's `command` will be.
    pub(super) fn of_command(command: &MetaCommand) -> Settle {
        match command {
            MetaCommand::CreateTopic { name, .. } => Settle::Present(name.clone()),
            MetaCommand::DeleteTopic { id, .. } => Settle::Absent(*id),
            MetaCommand::UpdateTopic { id, .. } => Settle::Updated(*id),
            MetaCommand::User(UserCommand::Create { name, .. }) => {
                Settle::UserPresent(name.clone())
            }
            MetaCommand::User(UserCommand::Delete { name, id }) => {
                Settle::UserAbsent(name.clone(), *id)
            }
            MetaCommand::User(UserCommand::Change { name, id, .. }) => {
                Settle::UserChange(name.clone(), *id)
            }
            _ => unreachable!("only topic and user commands come from clients"),
        }
    }

    pub(super) fn shown_by(&self, meta: &crate::meta::Metastore<MetaWaiter>) -> bool {
        match self {
            Settle::UserPresent(name) => meta.user(name).is_some(),
            Settle::UserAbsent(name, id) => meta.user(name).is_none_or(|user| user.id != *id),
            Settle::UserChange(..) => false, // replaced by `UserShows` once the leader answered
            Settle::UserShows(shown) => meta
                .user(&shown.name)
                .is_none_or(|user| user.id != shown.id || user.updated_ms >= shown.updated_ms),
            Settle::Present(name) => meta.topic(name).is_some(),
            Settle::Absent(id) => meta.topic_by_id(*id).is_none(),
            Settle::Updated(_) => false, // replaced by `Shows` once the leader answered
            Settle::Shows(topic) => match meta.topic_by_id(topic.id) {
                Some(now) => {
                    (now.retention_ms, now.retention_bytes)
                        == (topic.retention_ms, topic.retention_bytes)
                }
                None => meta.confirm_gone_locally(topic.id),
            },
        }
    }
}

impl Remote {
    /// Request ids of this incarnation start at `base` (see `incarnation_id_base`).
    pub(super) fn starting_at(base: u64) -> Remote {
        Remote { next_id: base, ..Remote::default() }
    }

    /// A fresh id for a message that expects an answer.
    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The earliest deadline of anything outstanding.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let commits = self.commits.values().map(|(_, at)| *at);
        let forwards = self.forwards.values().map(|(_, _, at)| *at);
        let settling = self.settling.iter().map(|s| s.deadline);
        let stats = self.topic_stats.values().map(|s| s.deadline);
        commits.chain(forwards).chain(settling).chain(stats).min()
    }
}

impl Node {
    /// Bytes from a peer: decode, then route. Undecodable bytes are refused and counted.
    pub(super) fn handle_peer(&mut self, from: NodeId, bytes: &bytes::Bytes) {
        let message = match PeerMessage::decode(bytes) {
            Ok(message) => message,
            Err(error) => {
                self.counters.peer_messages_refused += 1;
                tracing::warn!(from = from.0, %error, "refused a peer message");
                return;
            }
        };
        if !self.is_serving() {
            return; // nothing read at start-up is trusted yet; peers retry
        }
        if self.refuse_forwarded(from, &message) {
            return;
        }
        match message {
            PeerMessage::Raft(bytes) => self.meta.handle_message(self.now, from, &bytes),
            PeerMessage::CommitBatch { id, origin_checkpoint, target, records } => {
                self.on_commit_batch(from, id, origin_checkpoint, target, records);
            }
            PeerMessage::CommitReply { id, result } => self.on_commit_reply(id, result),
            PeerMessage::ConfirmGone { id, topic } => {
                let waiter = MetaWaiter::Confirm { topic, asker: Some((from, id)) };
                self.meta.read_barrier(self.now, waiter);
            }
            PeerMessage::ConfirmGoneReply { id, topic, gone } => {
                if self.remote.forwards.remove(&id).is_some() {
                    self.on_leader_confirmation(topic, gone);
                }
            }
            PeerMessage::Propose { id, command, .. } => {
                self.on_forwarded_command(from, id, &command);
            }
            PeerMessage::ProposeReply { id, result } => self.on_propose_reply(id, result),
            PeerMessage::Consume { id, target, offset, max, wait_ms, .. } => {
                self.on_forwarded_consume(from, id, target, offset, max, wait_ms);
            }
            PeerMessage::ConsumeReply { id, result } => self.on_consume_reply(id, result),
            PeerMessage::TopicStats { id, topic } => {
                let partitions = self.local_partition_stats(topic);
                self.send(from, &PeerMessage::TopicStatsReply { id, partitions });
            }
            PeerMessage::TopicStatsReply { id, partitions } => {
                self.on_topic_stats(from, id, &partitions);
            }
            PeerMessage::Receive { id, target, max, wait_ms, .. } => {
                self.on_peer_receive(from, id, target, (max, wait_ms));
            }
            PeerMessage::ReceiveReply { id, result } => {
                if let Some((Forwarded::Receive { pending }, _, _)) =
                    self.remote.forwards.remove(&id)
                    && let Some(key) = self.receive_partition(pending)
                {
                    self.on_peer_receive_reply(pending, key, result);
                }
            }
            PeerMessage::ReceiveWatch { id, topic, wait_ms } => {
                self.on_receive_watch(from, id, topic, wait_ms);
            }
            PeerMessage::ReceiveWatchReply { id } => self.on_receive_watch_reply(id),
            PeerMessage::Settle { id, topic, action, handles, .. } => {
                self.on_peer_settle(from, id, topic, action, &handles);
            }
            PeerMessage::SettleReply { id, results } => {
                if let Some((Forwarded::Settle { batch, slots }, _, _)) =
                    self.remote.forwards.remove(&id)
                {
                    self.on_settle_results(batch, &slots, Some(results), "");
                }
            }
        }
    }

    /// A commit batch for a partition we (should) own.
    fn on_commit_batch(
        &mut self,
        from: NodeId,
        id: u64,
        origin_checkpoint: u64,
        target: PartitionKey,
        records: Vec<WireRecord>,
    ) {
        let known = self.meta.topic_by_id(target.topic).is_some();
        let refusal = if let Err(reason) = check_wire_records(&records) {
            // Only a faulty or hostile peer sends these: its own accept path refuses them.
            self.counters.peer_messages_refused += 1;
            tracing::warn!(from = from.0, %reason, "refused a commit batch");
            Some(reason)
        } else if !known && !self.meta.caught_up() {
            // We may simply not know the topic yet: a retry later, not "gone".
            Some("owner's metastore replica is behind".to_string())
        } else if known && self.meta.owner(target) != Some(self.config.node_id) {
            Some(format!("node {} does not own {target}", self.config.node_id.0))
        } else if self.jobs.len() >= PEER_COMMIT_JOBS_MAX {
            Some(format!("owner overloaded: {} commit jobs queued", self.jobs.len()))
        } else {
            None // unknown to a caught-up replica: enqueue_commit answers TopicGone
        };
        if let Some(reason) = refusal {
            let result = WireCommitResult::Failed(reason);
            self.send(from, &PeerMessage::CommitReply { id, result });
            return;
        }
        let records = records
            .into_iter()
            .map(|r| PartitionRecord {
                offset: 0,
                timestamp_ms: r.timestamp_ms,
                origin_node: from,
                origin_seq: r.seq,
                key: r.key,
                payload: r.payload,
            })
            .collect();
        self.enqueue_commit(target, from, origin_checkpoint, records, ReplyTo::Peer { from, id });
        self.start_queued_commits();
    }

    /// An owner answered one of our commits (late answers after a timeout are ignored: the
    /// dispatcher already retried, and idempotent commits make the retry land once).
    fn on_commit_reply(&mut self, id: u64, result: WireCommitResult) {
        let commit = CommitId(id);
        if self.remote.commits.remove(&commit).is_none() {
            return;
        }
        let result = match result {
            WireCommitResult::Committed { first_offset, .. } => {
                self.counters.remote_commits_ok += 1;
                CommitResult::Committed { first_offset }
            }
            WireCommitResult::Failed(reason) => {
                self.counters.remote_commits_failed += 1;
                CommitResult::Failed(reason)
            }
            WireCommitResult::TopicGone => CommitResult::TopicGone,
        };
        self.finish_commit(commit, result);
    }

    /// A follower forwarded a metastore command to us.
    fn on_forwarded_command(&mut self, from: NodeId, id: u64, command: &[u8]) {
        let Some(command) = decode_command(command) else {
            let error = WireError { status: 400, message: "undecodable command".into() };
            let result = WireAdminResult::Error(error);
            self.send(from, &PeerMessage::ProposeReply { id, result });
            return;
        };
        if let Err(error) = self.meta.propose(self.now, command, MetaWaiter::Peer { from, id }) {
            let error = ClientError::Unavailable(error.to_string());
            let result = WireAdminResult::Error(WireError::from_client(&error));
            self.send(from, &PeerMessage::ProposeReply { id, result });
        }
    }

    fn on_propose_reply(&mut self, id: u64, result: WireAdminResult) {
        let Some((forwarded, _, _)) = self.remote.forwards.remove(&id) else {
            return;
        };
        let Forwarded::Admin { request, settle } = forwarded else {
            return;
        };
        let deadline = self.now.plus_millis(FORWARD_TIMEOUT_MS);
        let (reply, until) = match (result, settle) {
            (WireAdminResult::Created(topic), Settle::Present(name)) if topic.name == name => {
                (ClientReply::TopicCreated(topic), Settle::Present(name))
            }
            (WireAdminResult::Done, Settle::Absent(id)) => {
                (ClientReply::TopicDeleted, Settle::Absent(id))
            }
            (WireAdminResult::Updated(topic), Settle::Updated(id)) if topic.id == id => {
                (ClientReply::TopicUpdated(topic.clone()), Settle::Shows(topic))
            }
            (WireAdminResult::User(user), Settle::UserPresent(name)) if user.name == name => {
                (ClientReply::UserCreated(user), Settle::UserPresent(name))
            }
            (WireAdminResult::Done, Settle::UserAbsent(name, id)) => {
                (ClientReply::UserDeleted, Settle::UserAbsent(name, id))
            }
            (WireAdminResult::User(user), Settle::UserChange(name, id))
                if user.name == name && user.id == id =>
            {
                (ClientReply::UserChanged(user.clone()), Settle::UserShows(user))
            }
            (WireAdminResult::Error(error), _) => {
                return self.reply(request, ClientReply::Error(error.into_client()));
            }
            (other, settle) => {
                let what = format!("the leader answered {settle:?} with {other:?}");
                return self.reply(request, ClientReply::Error(ClientError::Internal(what)));
            }
        };
        self.remote.settling.push(Settling { request, reply, until, deadline });
    }

    /// Another node reads one of our partitions for its client; with `wait_ms`, a read that
    /// finds nothing parks until a record there is visible (only on a partition we own).
    pub(super) fn on_forwarded_consume(
        &mut self,
        from: NodeId,
        id: u64,
        target: PartitionKey,
        offset: u64,
        max: u32,
        wait_ms: u64,
    ) {
        let log = self.partitions.get(&target);
        if log.is_none() && self.meta.topic_by_id(target.topic).is_none() {
            let result = Err(WireError { status: 404, message: "topic not found".into() });
            self.send(from, &PeerMessage::ConsumeReply { id, result });
            return;
        }
        if let Some(refusal) = log.and_then(|log| log.refuse_read(offset)) {
            let error = super::client::read_refusal_error(refusal);
            let result = Err(WireError::from_client(&error));
            self.send(from, &PeerMessage::ConsumeReply { id, result });
            return;
        }
        let wanted = u64::from(max.clamp(1, MAX_CONSUME_RECORDS));
        let Some(plan) = log.and_then(|log| log.read_plan(offset, wanted, MAX_CONSUME_BYTES))
        else {
            let owned = self.meta.owner(target) == Some(self.config.node_id);
            let wait_ms = if owned { wait_ms } else { 0 };
            let waiter = Waiter::Peer { from, id, key: target, offset, max };
            return self.park_or_answer_empty(waiter, wait_ms);
        };
        let op = DiskOp::Read { file: plan.file, offset: plan.pos, len: plan.len };
        let asker = ConsumeAsker::Peer { from, id };
        self.emit(IoPurpose::Consume { key: target, plan, asker }, op);
    }

    fn on_consume_reply(&mut self, id: u64, result: Result<Vec<WireConsumed>, WireError>) {
        let Some((Forwarded::Consume { request, topic, partition }, _, _)) =
            self.remote.forwards.remove(&id)
        else {
            return;
        };
        let reply = match result {
            Ok(records) => ClientReply::Records(
                records
                    .into_iter()
                    .map(|r| ConsumedRecord {
                        topic: topic.clone(),
                        partition,
                        offset: r.offset,
                        key: r.key,
                        payload: r.payload,
                        timestamp_ms: r.timestamp_ms,
                    })
                    .collect(),
            ),
            Err(error) => ClientReply::Error(error.into_client()),
        };
        self.reply(request, reply);
    }

    /// Ends everything whose deadline passed: remote commits fail (the dispatcher backs off and
    /// retries), forwarded requests answer 503, settling answers go out as they are.
    pub(super) fn expire_remote(&mut self) {
        let now = self.now;
        let expired: Vec<CommitId> = self
            .remote
            .commits
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.remote.commits.remove(&id);
            self.counters.remote_commits_failed += 1;
            self.finish_commit(id, CommitResult::Failed("commit timed out".into()));
        }
        let expired: Vec<u64> = self
            .remote
            .forwards
            .iter()
            .filter(|(_, (_, _, at))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.fail_forward(id);
        }
        let late: Vec<u64> = self
            .remote
            .topic_stats
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let pending = self.remote.topic_stats.remove(&id).expect("listed above");
            self.reply(pending.request, ClientReply::Topic(pending.topic, pending.stats));
        }
        let (due, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.remote.settling).into_iter().partition(|s| s.deadline <= now);
        self.remote.settling = waiting;
        for settled in due {
            self.reply(settled.request, settled.reply);
        }
    }

    /// Sends a commit to a remote owner.
    pub(super) fn send_commit(
        &mut self,
        id: CommitId,
        owner: NodeId,
        target: PartitionKey,
        records: Vec<crate::wal::WalRecord>,
    ) {
        let records = records
            .into_iter()
            .map(|r| crate::peer::WireRecord {
                seq: r.seq,
                timestamp_ms: r.timestamp_ms,
                key: r.key,
                payload: r.payload,
            })
            .collect();
        let origin_checkpoint = self.wal.durable_checkpoint();
        let message = PeerMessage::CommitBatch { id: id.0, origin_checkpoint, target, records };
        self.send(owner, &message);
        self.remote.commits.insert(id, (owner, self.now.plus_millis(COMMIT_TIMEOUT_MS)));
    }

    /// Membership says `owner` died: its commits in flight will not be answered, so they fail
    /// now (a commit that landed anyway makes an allowed duplicate) and its records reroute.
    pub(super) fn abandon_commits_to(&mut self, owner: NodeId) {
        let doomed: Vec<CommitId> = self
            .remote
            .commits
            .iter()
            .filter(|(_, (to, _))| *to == owner)
            .map(|(id, _)| *id)
            .collect();
        for id in doomed {
            self.remote.commits.remove(&id);
            self.counters.remote_commits_failed += 1;
            self.finish_commit(id, CommitResult::Failed(format!("owner node {} died", owner.0)));
        }
    }

    /// The numbers of every partition of `topic` this node owns (zeros for one that never
    /// received a record) or holds a log of.
    fn local_partition_stats(&self, topic: TopicId) -> Vec<(u32, PartitionNumbers)> {
        let range =
            PartitionKey { topic, partition: 0 }..=PartitionKey { topic, partition: u32::MAX };
        let mut numbers: BTreeMap<u32, PartitionNumbers> = self
            .partitions
            .range(range)
            .map(|(key, _)| (key.partition, self.numbers_of(*key)))
            .collect();
        let partitions = self.meta.topic_by_id(topic).map_or(0, |t| t.partitions);
        for partition in 0..partitions {
            let key = PartitionKey { topic, partition };
            if self.meta.owner(key) == Some(self.config.node_id) {
                numbers.entry(partition).or_default();
            }
        }
        numbers.into_iter().collect()
    }

    /// Asks every live owner of `topic`'s partitions for their statistics, or answers at once if
    /// there is nobody to ask. Owners that do not answer in time leave their partitions unknown.
    pub(super) fn gather_topic_stats(
        &mut self,
        request: RequestId,
        topic: crate::api::TopicInfo,
        stats: Vec<crate::api::PartitionStats>,
    ) {
        let waiting: std::collections::BTreeSet<NodeId> = stats
            .iter()
            .filter(|p| p.numbers.is_none())
            .map(|p| NodeId(p.owner_node))
            .filter(|owner| *owner != self.config.node_id && self.meta.is_alive(*owner))
            .collect();
        if waiting.is_empty() || self.peer_requests() >= PEER_REQUESTS_MAX {
            // Nobody to ask, or too much outstanding: answer with what is known here.
            return self.reply(request, ClientReply::Topic(topic, stats));
        }
        let id = self.remote.next_id();
        for owner in &waiting {
            self.send(*owner, &PeerMessage::TopicStats { id, topic: topic.id });
        }
        let deadline = self.now.plus_millis(STATS_TIMEOUT_MS);
        let pending = PendingTopicStats { request, topic, stats, waiting, deadline };
        self.remote.topic_stats.insert(id, pending);
    }

    fn on_topic_stats(&mut self, from: NodeId, id: u64, partitions: &[(u32, PartitionNumbers)]) {
        let Some(pending) = self.remote.topic_stats.get_mut(&id) else { return };
        if !pending.waiting.remove(&from) {
            return;
        }
        for &(partition, numbers) in partitions {
            // In index order; all of the topic's partitions, or the one asked for.
            let at = pending.stats.binary_search_by_key(&partition, |p| p.index);
            let known = at.ok().and_then(|at| pending.stats.get_mut(at));
            if let Some(entry) = known.filter(|p| p.owner_node == from.0) {
                entry.numbers = Some(numbers);
            }
        }
        if pending.waiting.is_empty() {
            let done = self.remote.topic_stats.remove(&id).expect("present above");
            self.reply(done.request, ClientReply::Topic(done.topic, done.stats));
        }
    }

    /// Sends a request that expects an answer to `to`, remembering it until the answer, the
    /// deadline, or news that `to` is unreachable.
    pub(super) fn forward(
        &mut self,
        to: NodeId,
        kind: Forwarded,
        message: impl FnOnce(u64) -> PeerMessage,
    ) {
        self.forward_with_timeout(to, kind, FORWARD_TIMEOUT_MS, message);
    }

    /// `forward` with its own deadline (a long-poll consume waits past the usual one).
    pub(super) fn forward_with_timeout(
        &mut self,
        to: NodeId,
        kind: Forwarded,
        timeout_ms: u64,
        message: impl FnOnce(u64) -> PeerMessage,
    ) {
        if self.peer_requests() >= PEER_REQUESTS_MAX {
            return self.refuse_forward(kind);
        }
        let id = self.remote.next_id();
        let deadline = self.now.plus_millis(timeout_ms);
        self.remote.forwards.insert(id, (kind, to, deadline));
        self.send(to, &message(id));
    }

    /// Requests outstanding with peers (bounded by `PEER_REQUESTS_MAX`).
    pub(super) fn peer_requests(&self) -> usize {
        let remote = &self.remote;
        remote.forwards.len() + remote.settling.len() + remote.topic_stats.len()
    }

    /// Too many requests are outstanding with peers: a client's is answered `Overloaded`, the
    /// node's own (heartbeat, confirmation) waits for the next pass.
    fn refuse_forward(&mut self, kind: Forwarded) {
        let error = ClientError::Overloaded("too many requests outstanding with peers".into());
        match kind {
            Forwarded::Admin { request, .. } | Forwarded::Consume { request, .. } => {
                self.reply(request, ClientReply::Error(error));
            }
            Forwarded::Receive { pending } => self.on_receive_forward_failed(pending, error),
            Forwarded::Settle { batch, slots } => {
                self.on_settle_results(batch, &slots, None, &error.to_string());
            }
            Forwarded::Heartbeat | Forwarded::Confirm => {}
        }
    }

    /// A forwarded request will get no answer: its client gets a 503.
    fn fail_forward(&mut self, id: u64) {
        let Some((forwarded, to, _)) = self.remote.forwards.remove(&id) else { return };
        let message = match forwarded {
            Forwarded::Admin { .. } => {
                "the metastore leader did not answer (no quorum?); the change may still take effect \
                 once a majority is back"
                    .to_string()
            }
            _ => format!("node {} did not answer", to.0),
        };
        match forwarded {
            Forwarded::Admin { request, .. } | Forwarded::Consume { request, .. } => {
                self.reply(request, ClientReply::Error(ClientError::Unavailable(message)));
            }
            Forwarded::Receive { pending } => {
                self.on_receive_forward_failed(pending, ClientError::Unavailable(message));
            }
            Forwarded::Settle { batch, slots } => {
                let message = format!("{message}; the settle may or may not have happened");
                self.on_settle_results(batch, &slots, None, &message);
            }
            Forwarded::Heartbeat | Forwarded::Confirm => {}
        }
    }

    /// The transport could not hand a message to `to`: nothing we await from it will come.
    pub(super) fn on_peer_unreachable(&mut self, to: NodeId) {
        self.abandon_commits_to(to);
        let doomed: Vec<u64> = self
            .remote
            .forwards
            .iter()
            .filter(|(_, (_, peer, _))| *peer == to)
            .map(|(id, _)| *id)
            .collect();
        for id in doomed {
            self.fail_forward(id);
        }
    }
}

/// Checks a peer's commit batch against the limits a client's produce obeys.
fn check_wire_records(records: &[WireRecord]) -> Result<(), String> {
    for (index, record) in records.iter().enumerate() {
        check_record_limits(&record.payload, record.key.as_deref())
            .map_err(|error| format!("record {index}: {error}"))?;
    }
    Ok(())
}
