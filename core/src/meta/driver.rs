//! How a `Metastore` drives raft-rs: ticks, the async `Ready` loop (persist, then acknowledge,
//! then release the messages that waited), applying committed entries, snapshots both ways,
//! read barriers, and the leader's membership duties.
//!
//! raft-rs's asynchronous-ready contract, as used here: each `Ready`'s entries and hard state go
//! into `LogStore` at once (raft reads them back from there) and into a log job; its
//! `persisted_messages` (every message of a non-leader, e.g. votes and append acks) are held
//! until that job's fsync completes, and only then is `on_persist_ready` called. A leader's own
//! messages go out at once: raft counts its own entry only after `on_persist_ready`.
//!
//! Committed entries are applied only once a commit index covering them is durable on this
//! node (a hard state frame written by a log job, or the recovered files). Raft itself allows
//! applying earlier, but a replica that applied (and answered) an entry whose commit index was
//! still in memory comes back after a crash at the older durable commit index, and serves the
//! state from before that entry (finding M4: a 204'd delete undone for as long as the restarted
//! single voter cannot commit an entry of its term). The wait costs no extra fsync: the hard
//! state is written anyway, by the next log job.

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{Entry, EntryType, Message, MessageType, Snapshot};
use raft::{ReadState, SnapshotStatus, StateRole};
use rand::RngExt;

use crate::api::ClientError;
use crate::ids::NodeId;

use super::command::{Applied, MetaCommand, decode_command, encode_command};
use super::persist::Durable;
use super::state::MetaState;
use super::storage::{SnapRecord, encode_snap_record, put_entries};
use super::{Barrier, MAX_COMMAND_BYTES, MetaOutput, Metastore, Proposal, ProposeError};

/// Most ticks replayed at once after the caller fell behind (e.g. a paused process): more would
/// only fire elections that the pause already made stale.
const MAX_CATCH_UP_TICKS: u32 = 50;
/// A read barrier without an answer is re-asked this often (a new leader drops read requests
/// until it has committed an entry of its term).
const BARRIER_RETRY_TICKS: u64 = 3;
/// A timed-out proposal is ambiguous: it may sit in the leader's log and commit later.
const PROPOSAL_TIMED_OUT: &str =
    "metastore proposal timed out (no quorum?); it may still take effect once a majority is back";
/// Another entry took the proposal's log index in a leader change: it can never commit.
const PROPOSAL_LOST: &str =
    "metastore proposal lost in a leader change (another entry took its place): retry";

impl<W> Metastore<W> {
    /// Everything that follows any input: the ready loop, role changes, compaction, barriers,
    /// and moving disk operations to the outputs.
    pub(super) fn after_input(&mut self) {
        self.process_ready();
        self.observe_role();
        self.maybe_compact();
        self.complete_barriers();
        while let Some((io, op)) = self.persist.poll_io() {
            self.outputs.push_back(MetaOutput::Disk { io, op });
        }
    }

    pub(super) fn run_ticks(&mut self) {
        let mut ticks = 0;
        while self.next_tick <= self.now && ticks < MAX_CATCH_UP_TICKS {
            self.next_tick = self.next_tick.plus_millis(self.config.tick_ms);
            ticks += 1;
            let leaderless = self.raw.raft.leader_id == raft::INVALID_ID;
            if self.raw.raft.state != StateRole::Leader && leaderless && self.skip_ticks > 0 {
                self.skip_ticks -= 1;
                continue;
            }
            self.raw.tick();
            self.process_ready();
            self.observe_role();
        }
        if self.next_tick <= self.now {
            self.next_tick = self.now.plus_millis(self.config.tick_ms);
        }
    }

    /// Tracks role changes: a new leader starts every member's dead timer afresh; a campaign
    /// withholds a seeded number of ticks so that repeated campaigns of two nodes drift apart.
    fn observe_role(&mut self) {
        let (role, term) = (self.raw.raft.state, self.raw.raft.term);
        if (role, term) == (self.role, self.role_term) {
            return;
        }
        let was = self.role;
        (self.role, self.role_term) = (role, term);
        tracing::debug!(node = self.config.node_id.0, role = self.role(), term, "metastore role");
        if was == StateRole::Leader && role != StateRole::Leader {
            self.seen.clear();
            self.marking.clear();
        }
        match role {
            StateRole::Leader if was != StateRole::Leader => {
                let now = self.now;
                self.seen = self.state.alive_members().map(|m| (m, now)).collect();
                self.skip_ticks = 0;
            }
            // A campaign, or a campaign lost without a leader to follow (a split vote turns
            // the candidates back into followers): draw a new spread. Resetting it there let
            // nodes with one election timeout campaign in lockstep forever (seed 0x26ea).
            StateRole::PreCandidate | StateRole::Candidate => self.draw_campaign_spread(),
            StateRole::Follower if self.raw.raft.leader_id == raft::INVALID_ID => {
                self.draw_campaign_spread();
            }
            _ => self.skip_ticks = 0,
        }
    }

    fn draw_campaign_spread(&mut self) {
        self.skip_ticks = self.rng.random_range(0..self.config.election_ticks.max(1));
    }

    /// Leader only: proposes `MarkDead` for members whose heartbeats this leader has not seen
    /// applied for `dead_after_ms` (by its own clock, so skew between nodes does not matter).
    pub(super) fn leader_duties(&mut self) {
        if !self.is_leader() {
            return;
        }
        let timeout_us = self.config.dead_after_ms * 1_000;
        let now = self.now;
        let alive: Vec<NodeId> = self.state.alive_members().collect();
        for node in alive {
            if node == self.config.node_id {
                continue;
            }
            let seen = *self.seen.entry(node).or_insert(now);
            let marking = self.marking.get(&node);
            if now.micros_since(seen) < timeout_us
                || marking.is_some_and(|at| now.micros_since(*at) < timeout_us)
            {
                continue;
            }
            let seen_heartbeats = self.state.heartbeats(node).expect("alive members exist");
            let verdict = MetaCommand::MarkDead { node, seen_heartbeats };
            tracing::info!(node = node.0, "metastore leader: marking a silent member dead");
            if self.propose_internal(&verdict, None).is_ok() {
                self.marking.insert(node, now);
            }
        }
    }

    /// Fails proposals and barriers past their deadline; re-asks unanswered barriers.
    pub(super) fn expire_requests(&mut self) {
        let now = self.now;
        let expired: Vec<u64> = self
            .proposals
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(index, _)| *index)
            .collect();
        for index in expired {
            let proposal = self.proposals.remove(&index).expect("listed above");
            self.fail_waiter(proposal.waiter, PROPOSAL_TIMED_OUT);
        }
        let expired: Vec<u64> =
            self.barriers.iter().filter(|(_, b)| b.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            let barrier = self.barriers.remove(&id).expect("listed above");
            self.outputs.push_back(MetaOutput::Barrier { ctx: barrier.ctx, ok: false });
        }
        let retry = self.config.tick_ms * BARRIER_RETRY_TICKS;
        let mut asks = Vec::new();
        for (id, barrier) in &mut self.barriers {
            if barrier.read_index.is_none() && barrier.retry_at <= now {
                barrier.retry_at = now.plus_millis(retry);
                asks.push(*id);
            }
        }
        for id in asks {
            let ctx = self.barrier_ctx(id);
            self.raw.read_index(ctx);
        }
    }

    fn fail_waiter(&mut self, waiter: Option<W>, why: &str) {
        if let Some(waiter) = waiter {
            self.outputs.push_back(MetaOutput::Applied {
                waiter: Some(waiter),
                index: None,
                result: Err(ClientError::Unavailable(why.to_string())),
            });
        }
    }

    pub(super) fn step_message(&mut self, from: NodeId, bytes: &[u8]) {
        let Ok(message) = Message::parse_from_bytes(bytes) else {
            self.counters.messages_dropped += 1;
            return;
        };
        // Local message types are raft's own timers; we never forward proposals, so a peer's
        // MsgPropose is not part of our protocol either. Only voters take part: raft-rs panics on
        // some messages from a node outside its configuration (fuzz target `node`).
        let misaddressed = message.from != u64::from(from.0)
            || !self.config.voters.contains(&from)
            || message.to != u64::from(self.config.node_id.0)
            || raft::raw_node::is_local_msg(message.get_msg_type())
            || message.get_msg_type() == MessageType::MsgPropose;
        let bad_snapshot = message.get_msg_type() == MessageType::MsgSnapshot
            && MetaState::decode(message.get_snapshot().get_data()).is_none();
        if misaddressed || bad_snapshot || self.persist.failed().is_some() {
            self.counters.messages_dropped += 1;
            return;
        }
        if self.raw.step(message).is_err() {
            self.counters.step_errors += 1;
        }
    }

    pub(super) fn propose_internal(
        &mut self,
        command: &MetaCommand,
        waiter: Option<W>,
    ) -> Result<(), ProposeError> {
        if let Some(error) = self.persist.failed() {
            return Err(ProposeError::Failed(error.clone()));
        }
        if !self.is_leader() {
            return Err(ProposeError::NotLeader { leader: self.leader() });
        }
        let data = encode_command(command);
        if data.len() > MAX_COMMAND_BYTES {
            return Err(ProposeError::TooLarge(data.len()));
        }
        let before = self.raw.raft.raft_log.last_index();
        self.raw.propose(Vec::new(), data.clone()).map_err(|_| ProposeError::Dropped)?;
        let index = self.raw.raft.raft_log.last_index();
        assert_eq!(index, before + 1, "invariant: a proposal appends one entry");
        let proposal = Proposal {
            term: self.raw.raft.term,
            data,
            waiter,
            deadline: self.now.plus_millis(self.config.request_timeout_ms),
        };
        if let Some(older) = self.proposals.insert(index, proposal) {
            // Our entry of an earlier term at this index was overwritten: it can never commit.
            self.fail_waiter(older.waiter, PROPOSAL_LOST);
        }
        Ok(())
    }

    pub(super) fn start_barrier(&mut self, ctx: W) {
        if self.persist.failed().is_some() || self.leader().is_none() {
            self.outputs.push_back(MetaOutput::Barrier { ctx, ok: false });
            return;
        }
        let id = self.next_barrier;
        self.next_barrier += 1;
        let barrier = Barrier {
            ctx,
            deadline: self.now.plus_millis(self.config.request_timeout_ms),
            retry_at: self.now.plus_millis(self.config.tick_ms * BARRIER_RETRY_TICKS),
            read_index: None,
        };
        self.barriers.insert(id, barrier);
        self.raw.read_index(self.barrier_ctx(id));
    }

    /// The leader keys pending reads by their context bytes and ignores a duplicate, so the
    /// context names the node as well as the barrier (ids start from the recovery time, so a
    /// restarted node does not reuse an id a leader may still hold).
    fn barrier_ctx(&self, id: u64) -> Vec<u8> {
        let mut ctx = self.config.node_id.0.to_le_bytes().to_vec();
        ctx.extend_from_slice(&id.to_le_bytes());
        ctx
    }

    fn on_read_state(&mut self, read: ReadState) {
        if read.request_ctx.len() != 12
            || read.request_ctx[..4] != self.config.node_id.0.to_le_bytes()
        {
            return;
        }
        let id = u64::from_le_bytes(read.request_ctx[4..].try_into().expect("8 bytes"));
        if let Some(barrier) = self.barriers.get_mut(&id) {
            barrier.read_index.get_or_insert(read.index);
        }
    }

    fn complete_barriers(&mut self) {
        let applied = self.applied;
        let done: Vec<u64> = self
            .barriers
            .iter()
            .filter(|(_, b)| b.read_index.is_some_and(|index| index <= applied))
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            let barrier = self.barriers.remove(&id).expect("listed above");
            self.outputs.push_back(MetaOutput::Barrier { ctx: barrier.ctx, ok: true });
        }
    }

    /// The async ready loop (see the module docs).
    fn process_ready(&mut self) {
        while self.persist.failed().is_none() && self.raw.has_ready() {
            let mut ready = self.raw.ready();
            let mut snapshots_sent = Vec::new();
            for message in ready.take_messages() {
                if message.get_msg_type() == MessageType::MsgSnapshot {
                    snapshots_sent.push(message.to);
                }
                self.send(message);
            }
            let snapshot_index = if ready.snapshot().is_empty() {
                None
            } else {
                Some(self.install_snapshot(ready.snapshot().clone()))
            };
            self.unapplied.extend(ready.take_committed_entries());
            for read in ready.take_read_states() {
                self.on_read_state(read);
            }
            let entries = ready.take_entries();
            let hard_state = ready.hs().cloned();
            let store = self.raw.mut_store();
            store.append(&entries).expect("invariant: raft hands out contiguous entries");
            if let Some(hs) = &hard_state {
                store.set_hard_state(hs.clone());
            }
            let mut data = Vec::new();
            put_entries(&mut data, &entries, hard_state.as_ref());
            let must_sync = !data.is_empty() || snapshot_index.is_some();
            let durable = Durable {
                ready: Some(ready.number()),
                messages: ready.take_persisted_messages(),
                snapshot_index,
                commit: hard_state.as_ref().map(|hs| hs.commit),
            };
            let now_durable = self.persist.push_ready(data, durable, must_sync);
            self.raw.advance_append_async(ready);
            match now_durable {
                Some(durable) => self.on_durable(durable),
                None => self.apply_durable(),
            }
            for to in snapshots_sent {
                // Optimistic, like etcd: if it was lost, the follower rejects the next append
                // and the leader sends the snapshot again.
                self.raw.report_snapshot(to, SnapshotStatus::Finish);
            }
        }
    }

    /// A ready's writes are durable: tell raft, apply what its commit index now covers, then
    /// release the messages that waited.
    pub(super) fn on_durable(&mut self, durable: Durable) {
        if let Some(number) = durable.ready {
            self.raw.on_persist_ready(number);
        }
        if let Some(index) = durable.snapshot_index {
            self.durable_commit = self.durable_commit.max(index);
            if self.raw.raft.raft_log.applied < index {
                self.raw.advance_apply_to(index);
            }
        }
        if let Some(commit) = durable.commit {
            self.durable_commit = self.durable_commit.max(commit);
        }
        self.apply_durable();
        for message in durable.messages {
            self.send(message);
        }
    }

    /// Applies the committed entries that a durable commit index covers (see the module docs).
    fn apply_durable(&mut self) {
        let mut entries = Vec::new();
        while let Some(entry) = self.unapplied.pop_front() {
            if entry.index > self.durable_commit {
                self.unapplied.push_front(entry);
                break;
            }
            entries.push(entry);
        }
        self.apply_entries(entries);
    }

    fn send(&mut self, message: Message) {
        let to = NodeId(u32::try_from(message.to).expect("invariant: node ids are u32"));
        let bytes = message.write_to_bytes().expect("invariant: raft messages encode");
        self.outputs.push_back(MetaOutput::Send { to, bytes: Bytes::from(bytes) });
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) {
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        for entry in entries {
            let waiter = self.take_waiter(&entry);
            self.applied = entry.index;
            if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() {
                continue; // a new leader's empty entry (we never propose configuration changes)
            }
            match decode_command(&entry.data) {
                Some(command) => self.apply_command(entry.index, command, waiter),
                None => {
                    self.counters.undecodable_entries += 1;
                    if let Some(waiter) = waiter {
                        let error = ClientError::Internal("undecodable metastore entry".into());
                        self.outputs.push_back(MetaOutput::Applied {
                            waiter: Some(waiter),
                            index: Some(entry.index),
                            result: Err(error),
                        });
                    }
                }
            }
        }
        self.raw.advance_apply_to(last);
    }

    /// The waiter of the proposal that made exactly this entry, matched by index, term and
    /// bytes: a term has one leader, which never overwrites its own entries, so (index, term)
    /// names one entry in every log (the bytes are a second look). A proposal of ours at this
    /// index that is not this entry was overwritten after a leader change: it never commits,
    /// and its waiter hears so (503), never this entry's result.
    fn take_waiter(&mut self, entry: &Entry) -> Option<W> {
        let proposal = self.proposals.remove(&entry.index)?;
        if proposal.term == entry.term && proposal.data[..] == entry.data[..] {
            return proposal.waiter;
        }
        debug_assert!(proposal.term != entry.term, "invariant: one entry per (index, term)");
        self.fail_waiter(proposal.waiter, PROPOSAL_LOST);
        None
    }

    fn apply_command(&mut self, index: u64, command: MetaCommand, waiter: Option<W>) {
        let leader = self.is_leader();
        match &command {
            MetaCommand::Heartbeat { node, .. } if leader => {
                self.seen.insert(*node, self.now);
            }
            MetaCommand::MarkDead { node, .. } => {
                self.marking.remove(node);
            }
            _ => {}
        }
        let result = self.state.apply(command);
        if let Ok(Applied::UserCreated(_) | Applied::UserChanged(_) | Applied::UserDeleted(_)) =
            &result
        {
            self.users_epoch += 1;
        }
        if let Ok(Applied::Liveness { node, alive }) = &result {
            tracing::info!(node = node.0, alive, "metastore: member liveness changed");
            self.outputs.push_back(MetaOutput::MembershipChanged { node: *node, alive: *alive });
        }
        self.outputs.push_back(MetaOutput::Applied { waiter, index: Some(index), result });
    }

    /// Installs a snapshot received from the leader (in memory now, durably via a snapshot
    /// job). Reports what changed as if the covered commands had been applied one by one.
    fn install_snapshot(&mut self, snapshot: Snapshot) -> u64 {
        let index = snapshot.get_metadata().index;
        let state = MetaState::decode(snapshot.get_data())
            .expect("invariant: step_message only steps snapshots whose image decodes");
        let old = std::mem::replace(&mut self.state, state);
        self.users_epoch += 1;
        self.outputs.push_back(MetaOutput::UsersReplaced { index });
        self.report_differences(&old);
        self.applied = self.applied.max(index);
        // Committed entries still waiting for their commit index to be durable are in the image.
        self.unapplied.retain(|entry| entry.index > index);
        let covered: Vec<u64> = self.proposals.range(..=index).map(|(i, _)| *i).collect();
        for i in covered {
            let proposal = self.proposals.remove(&i).expect("listed above");
            self.fail_waiter(proposal.waiter, "metastore proposal outcome unknown (snapshot)");
        }
        let store = self.raw.mut_store();
        store.install_snapshot(snapshot.clone());
        self.snapshot_seq += 1;
        let record = SnapRecord {
            seq: self.snapshot_seq,
            metadata: snapshot.get_metadata().clone(),
            hard_state: store.hard_state().clone(),
            image: snapshot.data.clone(),
            entries: Vec::new(),
        };
        self.persist.push_snapshot(self.snapshot_seq, encode_snap_record(&record));
        self.counters.snapshots_installed += 1;
        index
    }

    fn report_differences(&mut self, old: &MetaState) {
        let mut changes = Vec::new();
        for topic in old.topics() {
            if self.state.topic_by_id(topic.id).is_none() {
                changes.push(Ok(Applied::Deleted(topic.clone())));
            }
        }
        for topic in self.state.topics() {
            if old.topic_by_id(topic.id).is_none() {
                changes.push(Ok(Applied::Created(topic.clone())));
            }
        }
        for member in self.state.members() {
            if old.is_alive(member.id) != member.alive {
                let (node, alive) = (member.id, member.alive);
                self.outputs.push_back(MetaOutput::MembershipChanged { node, alive });
            }
        }
        for result in changes {
            self.outputs.push_back(MetaOutput::Applied { waiter: None, index: None, result });
        }
    }

    /// Takes a local snapshot when enough entries were applied (or the log grew large):
    /// compacts raft's storage now, and resets the log once the record is durable.
    fn maybe_compact(&mut self) {
        let store = self.raw.store();
        let since = self.applied - store.snapshot_index();
        let due = since >= self.config.snapshot_every_entries
            || (since > 0 && self.persist.log_bytes > self.config.log_bytes_max);
        if !due || self.persist.failed().is_some() || self.persist.snapshot_pending() {
            return;
        }
        let index = self.applied;
        let mut snapshot = Snapshot::default();
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = store.term_of(index).expect("invariant: applied entries are in the log");
        meta.set_conf_state(store.conf_state().clone());
        let image = Bytes::from(self.state.encode());
        snapshot.set_data(image.clone());
        self.snapshot_seq += 1;
        let record = SnapRecord {
            seq: self.snapshot_seq,
            metadata: snapshot.get_metadata().clone(),
            hard_state: store.hard_state().clone(),
            image,
            entries: store.entries_after(index).to_vec(),
        };
        self.raw.mut_store().compact_to(snapshot);
        self.persist.push_snapshot(self.snapshot_seq, encode_snap_record(&record));
        self.counters.snapshots_taken += 1;
        tracing::debug!(index, seq = self.snapshot_seq, "metastore snapshot taken");
    }
}
