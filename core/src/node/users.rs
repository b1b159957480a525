//! User administration (docs/design.md §8): reads answered from this node's metastore replica,
//! changes proposed to the metastore like topic commands (forwarded to the leader when we do not
//! lead, answered once our own replica shows them). A change or delete names the incarnation this
//! replica knows, so a late or repeated command never touches a user created again under the
//! same name. The grant check ran before any of this (`node/authorize.rs`).

use super::Node;
use crate::access::{Principal, validate_grants, validate_user_name};
use crate::api::{ClientError, ClientOp, ClientReply};
use crate::ids::RequestId;
use crate::meta::MetaCommand;
use crate::meta::users::{UserChange, UserCommand};

impl Node {
    /// One of the `/v1/users` requests.
    pub(super) fn handle_user_op(&mut self, request: RequestId, op: ClientOp, who: &Principal) {
        let command = match op {
            ClientOp::ListUsers => {
                let users = self.meta.users().list().cloned().collect();
                return self.reply(request, ClientReply::Users(users));
            }
            ClientOp::GetUser { name } => {
                let reply = match self.meta.user(&name) {
                    Some(user) => ClientReply::User(user.clone()),
                    None => ClientReply::Error(unknown_user(&name)),
                };
                return self.reply(request, reply);
            }
            ClientOp::CreateUser { name, hash, grants } => {
                let valid = validate_user_name(&name).and_then(|()| validate_grants(&grants));
                if let Err(message) = valid {
                    let error = ClientError::BadRequest(message);
                    return self.reply(request, ClientReply::Error(error));
                }
                let (now_ms, seen_next_id) = (self.now.as_millis(), self.meta.users().next_id());
                UserCommand::Create { name, hash, grants, now_ms, seen_next_id }
            }
            ClientOp::DeleteUser { name } => match self.meta.user(&name) {
                Some(user) => UserCommand::Delete { id: user.id, name },
                None => return self.reply(request, ClientReply::Error(unknown_user(&name))),
            },
            ClientOp::SetGrants { name, grants } => {
                if let Err(message) = validate_grants(&grants) {
                    let error = ClientError::BadRequest(message);
                    return self.reply(request, ClientReply::Error(error));
                }
                match self.change_of(&name, UserChange::Grants(grants)) {
                    Ok(command) => command,
                    Err(error) => return self.reply(request, ClientReply::Error(error)),
                }
            }
            ClientOp::SetPassword { name, hash } => {
                match self.change_of(&name, UserChange::Password(hash)) {
                    Ok(command) => command,
                    Err(error) => return self.reply(request, ClientReply::Error(error)),
                }
            }
            other => unreachable!("not a user request: {other:?}"),
        };
        self.propose_admin(request, MetaCommand::User(command), who);
    }

    /// `change` of the incarnation of `name` this replica knows now.
    fn change_of(&self, name: &str, change: UserChange) -> Result<UserCommand, ClientError> {
        let user = self.meta.user(name).ok_or_else(|| unknown_user(name))?;
        let now_ms = self.now.as_millis();
        Ok(UserCommand::Change { name: name.to_string(), id: user.id, change, now_ms })
    }
}

fn unknown_user(name: &str) -> ClientError {
    ClientError::NotFound(format!("user `{name}` not found"))
}
