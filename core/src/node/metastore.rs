//! The node's side of the metastore: ticking it, carrying its disk operations and Raft
//! messages, proposing topic commands (or forwarding them to the leader), answering whoever
//! waited for an applied command or a read barrier, and reacting to what was applied (a deleted
//! topic's partitions are dropped, a dead owner's records are rerouted).

use super::cluster::{Forwarded, Settle};
use super::{ClusterPlacement, IoPurpose, MetaWaiter, Node};
use crate::access::Principal;
use crate::api::{ClientError, ClientReply};
use crate::io::{NodeEvent, TopicApplied, UserApplied};
use crate::meta::{Applied, MetaCommand, MetaOutput, ProposeError, encode_command};
use crate::peer::{PeerMessage, WireAdminResult, WireError};

impl Node {
    /// One metastore tick, then this node's membership heartbeat if one is due.
    pub(super) fn tick_metastore(&mut self) {
        self.meta.handle_tick(self.now);
        if let Some(heartbeat) = self.meta.poll_heartbeat(self.now) {
            match self.meta.propose(self.now, heartbeat.clone(), MetaWaiter::Heartbeat) {
                Ok(()) => {}
                Err(ProposeError::NotLeader { leader: Some(leader) }) => {
                    let who = Principal::Trusted; // the node itself
                    self.forward_command(leader, &heartbeat, Forwarded::Heartbeat, who);
                }
                Err(error) => tracing::debug!(%error, "membership heartbeat not proposed"),
            }
        }
    }

    /// A client's topic or user command: proposed here if we lead, else forwarded for `who`.
    pub(super) fn propose_admin(
        &mut self,
        request: crate::ids::RequestId,
        command: MetaCommand,
        who: &Principal,
    ) {
        let settle = Settle::of_command(&command);
        match self.meta.propose(self.now, command.clone(), MetaWaiter::Client(request)) {
            Ok(()) => {}
            Err(ProposeError::NotLeader { leader: Some(leader) }) => {
                let kind = Forwarded::Admin { request, settle };
                self.forward_command(leader, &command, kind, who.clone());
            }
            Err(ProposeError::NotLeader { leader: None }) => {
                let error = ClientError::Unavailable("no metastore leader (no quorum?)".into());
                self.reply(request, ClientReply::Error(error));
            }
            Err(error) => {
                let error = ClientError::Unavailable(error.to_string());
                self.reply(request, ClientReply::Error(error));
            }
        }
    }

    fn forward_command(
        &mut self,
        leader: crate::ids::NodeId,
        command: &MetaCommand,
        kind: Forwarded,
        who: Principal,
    ) {
        let command = bytes::Bytes::from(encode_command(command));
        self.forward(leader, kind, |id| PeerMessage::Propose { id, who, command });
    }

    /// Carries out everything the metastore asked for or reported.
    pub(super) fn drain_metastore(&mut self) {
        while let Some(output) = self.meta.poll_output() {
            match output {
                MetaOutput::Disk { io, op } => self.emit(IoPurpose::Meta(io), op),
                MetaOutput::Send { to, bytes } => self.send(to, &PeerMessage::Raft(bytes)),
                MetaOutput::Applied { waiter, index, result } => {
                    self.on_applied(waiter, index, result);
                }
                MetaOutput::Barrier { ctx, ok } => self.on_barrier(ctx, ok),
                MetaOutput::UsersReplaced { index } => {
                    self.push_event(NodeEvent::UsersReplaced { index });
                }
                MetaOutput::MembershipChanged { node, alive } => {
                    tracing::info!(node = node.0, alive, "membership changed");
                    if !alive {
                        self.abandon_commits_to(node);
                    }
                    // A death moves that owner's records; a return may give records parked on
                    // another dead owner a live sibling.
                    let placement = ClusterPlacement(&self.meta);
                    self.dispatcher.reroute_dead_owners(self.now, &placement);
                }
            }
        }
    }

    fn on_applied(
        &mut self,
        waiter: Option<MetaWaiter>,
        index: Option<u64>,
        result: Result<Applied, ClientError>,
    ) {
        if let Ok(applied) = &result {
            self.log_topic_change(applied);
        }
        if let (Some(index), Ok(applied)) = (index, &result)
            && let Some((change, topic)) = topic_change(applied)
        {
            self.push_event(NodeEvent::TopicApplied { index, change, topic: topic.clone() });
        }
        if let (Some(index), Ok(applied)) = (index, &result)
            && let Some(change) = user_change(applied)
        {
            self.push_event(NodeEvent::UserApplied { index, change });
        }
        match waiter {
            Some(MetaWaiter::Client(request)) => {
                let reply = match admin_result(result) {
                    Ok(Applied::Created(topic)) => ClientReply::TopicCreated(topic),
                    Ok(Applied::Updated(topic)) => ClientReply::TopicUpdated(topic),
                    Ok(Applied::UserCreated(user)) => ClientReply::UserCreated(user),
                    Ok(Applied::UserChanged(user)) => ClientReply::UserChanged(user),
                    Ok(Applied::UserDeleted(_)) => ClientReply::UserDeleted,
                    Ok(_) => ClientReply::TopicDeleted,
                    Err(error) => ClientReply::Error(error),
                };
                self.reply(request, reply);
            }
            Some(MetaWaiter::Peer { from, id }) => {
                let result = match admin_result(result) {
                    Ok(Applied::Created(topic)) => WireAdminResult::Created(topic),
                    Ok(Applied::Updated(topic)) => WireAdminResult::Updated(topic),
                    Ok(Applied::UserCreated(user) | Applied::UserChanged(user)) => {
                        WireAdminResult::User(user)
                    }
                    Ok(_) => WireAdminResult::Done,
                    Err(error) => WireAdminResult::Error(WireError::from_client(&error)),
                };
                self.send(from, &PeerMessage::ProposeReply { id, result });
            }
            Some(MetaWaiter::Heartbeat | MetaWaiter::Confirm { .. }) | None => {}
        }
    }

    /// Logs an applied topic change; a deleted topic's partitions are dropped.
    fn log_topic_change(&mut self, applied: &Applied) {
        match applied {
            Applied::Deleted(topic) => {
                tracing::info!(topic = %topic.name, id = topic.id.0, "topic deleted");
                self.drop_partitions(topic.id, topic.partitions);
            }
            Applied::Created(topic) => {
                tracing::info!(topic = %topic.name, id = topic.id.0, partitions = topic.partitions, "topic created");
            }
            Applied::Updated(topic) => {
                let (ms, bytes) = (topic.retention_ms_in_force(), topic.retention_bytes);
                tracing::info!(topic = %topic.name, id = topic.id.0, retention_ms = ms, retention_bytes = ?bytes, "topic updated");
            }
            Applied::UserCreated(user) | Applied::UserChanged(user) => {
                let grants: Vec<String> = user
                    .grants
                    .iter()
                    .map(|g| format!("{}:{}", g.action.name(), g.topics))
                    .collect();
                tracing::info!(user = %user.name, id = user.id.0, ?grants, "user created or changed");
            }
            Applied::UserDeleted(user) => {
                tracing::info!(user = %user.name, id = user.id.0, "user deleted");
            }
            _ => {}
        }
    }

    /// Forwarded topic commands are answered once our own replica shows their effect, so a
    /// client that creates a topic through us can produce to it through us right away.
    pub(super) fn answer_settled_admin(&mut self) {
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.remote.settling)
            .into_iter()
            .partition(|s| s.until.shown_by(&self.meta));
        self.remote.settling = waiting;
        for settled in done {
            self.reply(settled.request, settled.reply);
        }
    }
}

/// The topic change an applied command reports, if it changed a topic.
fn topic_change(applied: &Applied) -> Option<(TopicApplied, &crate::api::TopicInfo)> {
    match applied {
        Applied::Created(topic) => Some((TopicApplied::Created, topic)),
        Applied::Updated(topic) => Some((TopicApplied::Updated, topic)),
        Applied::Deleted(topic) => Some((TopicApplied::Deleted, topic)),
        _ => None,
    }
}

/// The user change an applied command reports, if it changed a user.
fn user_change(applied: &Applied) -> Option<UserApplied> {
    match applied {
        Applied::UserCreated(user) | Applied::UserChanged(user) => {
            Some(UserApplied::Put(user.clone()))
        }
        Applied::UserDeleted(user) => {
            Some(UserApplied::Removed { name: user.name.clone(), id: user.id })
        }
        _ => None,
    }
}

/// What a topic or user command's waiter may be told: a create, update or delete, or an error.
/// Any other applied result (a heartbeat, "unchanged") would mean the waiter was matched to
/// another command's entry: an internal error, never answered as a delete.
fn admin_result(result: Result<Applied, ClientError>) -> Result<Applied, ClientError> {
    match result {
        Ok(Applied::Created(_) | Applied::Updated(_) | Applied::Deleted(_)) | Err(_) => result,
        Ok(Applied::UserCreated(_) | Applied::UserChanged(_) | Applied::UserDeleted(_)) => result,
        Ok(other) => Err(ClientError::Internal(format!(
            "a topic command's waiter was handed another command's result ({other:?})"
        ))),
    }
}
