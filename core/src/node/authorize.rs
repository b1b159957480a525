//! The grant check (docs/design.md §8). Every client request passes it on the node that took
//! it, before anything runs; every request another node forwards for its client passes it again
//! on the node that runs it (the metastore leader for a command, a partition's owner for a read
//! or a settle), so no node acts on what the latest state it has applied refuses. The check reads
//! the principal's grants from this node's metastore replica as it is now.

use super::Node;
use crate::access::{Action, Needs, Principal, UserId, allows};
use crate::api::{ClientError, ClientOp};
use crate::ids::{NodeId, TopicId};
use crate::meta::users::{UserChange, UserCommand};
use crate::meta::{MetaCommand, decode_command};
use crate::peer::{PeerMessage, WireAdminResult, WireError};

/// Where a request being checked comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A client of this node: the runtime verified the password against this replica's users.
    Client,
    /// Another node, for its client: a user unknown here means this replica is behind that
    /// node's (or the user was deleted since), so the answer is "retry", not "who are you".
    Peer,
}

impl Node {
    /// Whether `who` may run `op`: `Ok`, or the error to answer with (401, 403).
    pub(super) fn authorize(&self, who: &Principal, op: &ClientOp) -> Result<(), ClientError> {
        if *who == Principal::Trusted {
            return Ok(()); // access control is off: nothing to look up on the accept path
        }
        if let Some(refusal) = self_service_refusal(who, op) {
            return Err(refusal);
        }
        self.check(who, needs_of_op(op, who), Origin::Client)
    }

    /// Whether `who` may have `action` done on topic incarnation `topic` for another node's
    /// client. A topic this replica does not know passes: the request fails on its own.
    pub(super) fn authorize_forwarded(
        &self,
        who: &Principal,
        action: Action,
        topic: TopicId,
    ) -> Result<(), ClientError> {
        match self.meta.topic_by_id(topic) {
            Some(info) => self.check(who, Needs::Topic(action, &info.name), Origin::Peer),
            None => Ok(()),
        }
    }

    /// Whether `who` may propose `command` (forwarded to us, the leader).
    pub(super) fn authorize_command(
        &self,
        who: &Principal,
        command: &MetaCommand,
    ) -> Result<(), ClientError> {
        match needs_of_command(command, who) {
            Some(needs) => self.check(who, needs, Origin::Peer),
            None if *who == Principal::Trusted => Ok(()),
            None => Err(ClientError::Forbidden("only a node proposes membership".into())),
        }
    }

    /// Checks a request another node forwarded for its client again; a refused one is answered
    /// here (`true`: nothing more to do).
    pub(super) fn refuse_forwarded(&mut self, from: NodeId, message: &PeerMessage) -> bool {
        let verdict = match message {
            PeerMessage::Propose { who, command, .. } => match decode_command(command) {
                Some(command) => self.authorize_command(who, &command),
                None => Ok(()), // refused as undecodable by its handler
            },
            PeerMessage::Consume { who, target, .. } | PeerMessage::Receive { who, target, .. } => {
                self.authorize_forwarded(who, Action::Consume, target.topic)
            }
            PeerMessage::Settle { who, topic, .. } => {
                self.authorize_forwarded(who, Action::Consume, *topic)
            }
            _ => Ok(()),
        };
        let Err(error) = verdict else { return false };
        self.counters.requests_refused_access += 1;
        let error = WireError::from_client(&error);
        let answer = match message {
            PeerMessage::Propose { id, .. } => {
                PeerMessage::ProposeReply { id: *id, result: WireAdminResult::Error(error) }
            }
            PeerMessage::Consume { id, .. } => {
                PeerMessage::ConsumeReply { id: *id, result: Err(error) }
            }
            PeerMessage::Receive { id, .. } => {
                PeerMessage::ReceiveReply { id: *id, result: Err(error) }
            }
            PeerMessage::Settle { id, handles, .. } => {
                PeerMessage::SettleReply { id: *id, results: vec![Err(error); handles.len()] }
            }
            _ => unreachable!("only the requests checked above are refused"),
        };
        self.send(from, &answer);
        true
    }

    /// Whether `who` sees topic `name` in a listing (any grant covering it).
    pub(super) fn may_see(&self, who: &Principal, name: &str) -> bool {
        self.check(who, Needs::AnyOn(name), Origin::Client).is_ok()
    }

    fn check(&self, who: &Principal, needs: Needs<'_>, origin: Origin) -> Result<(), ClientError> {
        let Principal::User { name, id } = who else { return Ok(()) };
        let grants = match self.meta.user(name) {
            Some(user) if user.id == *id => &user.grants,
            _ => return Err(unknown_user(name, *id, origin, self.config.node_id.0)),
        };
        if allows(grants, needs) {
            Ok(())
        } else {
            Err(ClientError::Forbidden(refusal(name, needs)))
        }
    }
}

fn unknown_user(name: &str, id: UserId, origin: Origin, node: u32) -> ClientError {
    match origin {
        Origin::Client => ClientError::Unauthenticated(format!("user `{name}` does not exist")),
        Origin::Peer => ClientError::Unavailable(format!(
            "node {node} does not know user `{name}` (incarnation {}) yet: its metastore replica \
             is behind, or the user was deleted; retry",
            id.0
        )),
    }
}

/// The 403 message: what was missing.
fn refusal(user: &str, needs: Needs<'_>) -> String {
    match needs {
        Needs::Topic(action, topic) => {
            format!("user `{user}` holds no `{}` grant on topic `{topic}`", action.name())
        }
        Needs::AnyOn(topic) => format!("user `{user}` holds no grant on topic `{topic}`"),
        Needs::ClusterAdmin | Needs::Authenticated => {
            format!("user `{user}` holds no `admin` grant on `*`")
        }
    }
}

/// Whether `who` is the user `name`.
fn is_self(who: &Principal, name: &str) -> bool {
    matches!(who, Principal::User { name: own, .. } if own == name)
}

/// No one changes their own grants or deletes themselves (an admin cannot lock the cluster out
/// of its last admin by accident): 403 whatever the grants.
fn self_service_refusal(who: &Principal, op: &ClientOp) -> Option<ClientError> {
    let what = match op {
        ClientOp::SetGrants { name, .. } if is_self(who, name) => "change their own grants",
        ClientOp::DeleteUser { name } if is_self(who, name) => "delete themselves",
        _ => return None,
    };
    Some(ClientError::Forbidden(format!("no user may {what}")))
}

/// What running `op` needs.
fn needs_of_op<'a>(op: &'a ClientOp, who: &Principal) -> Needs<'a> {
    match op {
        ClientOp::CreateTopic { name, .. } => Needs::Topic(Action::Create, name),
        ClientOp::UpdateTopic { name, .. } | ClientOp::DeleteTopic { name } => {
            Needs::Topic(Action::Admin, name)
        }
        ClientOp::GetTopic { name, .. } => Needs::AnyOn(name),
        ClientOp::ListTopics { .. } => Needs::Authenticated,
        ClientOp::Produce { topic, .. } => Needs::Topic(Action::Produce, topic),
        ClientOp::Consume { topic, .. }
        | ClientOp::Receive { topic, .. }
        | ClientOp::Settle { topic, .. } => Needs::Topic(Action::Consume, topic),
        ClientOp::GetUser { name } | ClientOp::SetPassword { name, .. } if is_self(who, name) => {
            Needs::Authenticated
        }
        ClientOp::Members
        | ClientOp::CreateUser { .. }
        | ClientOp::ListUsers
        | ClientOp::GetUser { .. }
        | ClientOp::DeleteUser { .. }
        | ClientOp::SetGrants { .. }
        | ClientOp::SetPassword { .. } => Needs::ClusterAdmin,
    }
}

/// What proposing `command` needs; `None`: only a node may (membership).
fn needs_of_command<'a>(command: &'a MetaCommand, who: &Principal) -> Option<Needs<'a>> {
    Some(match command {
        MetaCommand::CreateTopic { name, .. } => Needs::Topic(Action::Create, name),
        MetaCommand::UpdateTopic { name, .. } | MetaCommand::DeleteTopic { name, .. } => {
            Needs::Topic(Action::Admin, name)
        }
        MetaCommand::User(UserCommand::Change {
            name, change: UserChange::Password(_), ..
        }) if is_self(who, name) => Needs::Authenticated,
        MetaCommand::User(_) => Needs::ClusterAdmin,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Principal {
        Principal::User { name: name.into(), id: UserId(1) }
    }

    #[test]
    fn a_user_reads_and_changes_only_its_own_password_without_admin() {
        let get = ClientOp::GetUser { name: "ann".into() };
        assert_eq!(needs_of_op(&get, &user("ann")), Needs::Authenticated);
        assert_eq!(needs_of_op(&get, &user("bob")), Needs::ClusterAdmin);
        assert_eq!(needs_of_op(&get, &Principal::Trusted), Needs::ClusterAdmin);
    }

    #[test]
    fn no_one_changes_their_own_grants_or_deletes_themselves() {
        let grants = ClientOp::SetGrants { name: "ann".into(), grants: vec![] };
        let delete = ClientOp::DeleteUser { name: "ann".into() };
        for op in [&grants, &delete] {
            assert!(matches!(
                self_service_refusal(&user("ann"), op),
                Some(ClientError::Forbidden(_))
            ));
            assert_eq!(self_service_refusal(&user("bob"), op), None);
            assert_eq!(self_service_refusal(&Principal::Trusted, op), None);
        }
    }
}
