//! The metastore's users (docs/design.md §8): each a name, an incarnation id, a password hash and
//! grants, with the same incarnation rules as topics: a change or delete names the incarnation its
//! proposer resolved and applies only while that one is current, and a create whose proposer
//! looked before a same-named user was deleted is refused, so no late or duplicated command
//! touches a later user of the name. Applied identically on every replica (validation at apply,
//! `BTreeMap`s, times inside the commands); the encoding of the table is part of the snapshot
//! image.

use std::collections::BTreeMap;

use super::command::{get_str, get_u8, put_str, put_u32, put_u64};
use super::tombstones::{Incarnation, Tombstones};
use crate::access::{
    Action, Grant, PasswordHash, TopicPattern, validate_grants, validate_user_name,
};
use crate::api::ClientError;
use crate::codec::Reader;
use crate::constants::MAX_USERS;

pub use crate::access::{UserId, UserInfo};

impl Incarnation for UserId {
    fn number(self) -> u64 {
        self.0
    }

    fn from_number(number: u64) -> Self {
        UserId(number)
    }
}

/// What a change to a user sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserChange {
    /// Replace the grants.
    Grants(Vec<Grant>),
    /// Replace the password hash.
    Password(PasswordHash),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct User {
    info: UserInfo,
    hash: PasswordHash,
}

/// A change to the users, as the metastore's log carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserCommand {
    /// Create a user. `seen_next_id` is the next user id on the replica of the node that took
    /// the request: a same-named user deleted since (id ≥ it) makes the create late, and it is
    /// refused, as a topic create is.
    Create { name: String, hash: PasswordHash, grants: Vec<Grant>, now_ms: u64, seen_next_id: u64 },
    /// Change incarnation `id` of user `name` (applied only while it is the current one).
    Change { name: String, id: UserId, change: UserChange, now_ms: u64 },
    /// Delete incarnation `id` of user `name` (applied only while it is the current one).
    Delete { name: String, id: UserId },
}

/// Command tags of the user commands (after the topic and member commands' 1..=8).
const CMD_USER_CREATE: u8 = 9;
const CMD_USER_GRANTS: u8 = 10;
const CMD_USER_PASSWORD: u8 = 11;
const CMD_USER_DELETE: u8 = 12;
pub(super) const CMD_USER_FIRST: u8 = CMD_USER_CREATE;
pub(super) const CMD_USER_LAST: u8 = CMD_USER_DELETE;

impl UserCommand {
    /// The command's bytes: tag, name, then its fields.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            UserCommand::Create { name, hash, grants, now_ms, seen_next_id } => {
                out.push(CMD_USER_CREATE);
                put_str(out, name);
                put_str(out, hash.expose());
                encode_grants(out, grants);
                put_u64(out, *now_ms);
                put_u64(out, *seen_next_id);
            }
            UserCommand::Change { name, id, change, now_ms } => {
                out.push(match change {
                    UserChange::Grants(_) => CMD_USER_GRANTS,
                    UserChange::Password(_) => CMD_USER_PASSWORD,
                });
                put_str(out, name);
                put_u64(out, id.0);
                match change {
                    UserChange::Grants(grants) => encode_grants(out, grants),
                    UserChange::Password(hash) => put_str(out, hash.expose()),
                }
                put_u64(out, *now_ms);
            }
            UserCommand::Delete { name, id } => {
                out.push(CMD_USER_DELETE);
                put_str(out, name);
                put_u64(out, id.0);
            }
        }
    }

    /// The fields after tag `tag` (one of `CMD_USER_FIRST..=CMD_USER_LAST`); `None` for bad
    /// bytes.
    pub(super) fn decode(r: &mut Reader<'_>, tag: u8) -> Option<UserCommand> {
        let name = get_str(r)?;
        Some(match tag {
            CMD_USER_CREATE => UserCommand::Create {
                name,
                hash: PasswordHash::new(get_str(r)?).ok()?,
                grants: decode_grants(r)?,
                now_ms: r.u64()?,
                seen_next_id: r.u64()?,
            },
            CMD_USER_GRANTS | CMD_USER_PASSWORD => {
                let id = UserId(r.u64()?);
                let change = if tag == CMD_USER_GRANTS {
                    UserChange::Grants(decode_grants(r)?)
                } else {
                    UserChange::Password(PasswordHash::new(get_str(r)?).ok()?)
                };
                UserCommand::Change { name, id, change, now_ms: r.u64()? }
            }
            CMD_USER_DELETE => UserCommand::Delete { name, id: UserId(r.u64()?) },
            _ => return None,
        })
    }
}

/// Every user, with the memory of deleted ones that late creates are judged against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Users {
    users: BTreeMap<String, User>,
    /// Next incarnation id; every id below it was issued once.
    next_id: u64,
    tombstones: Tombstones<UserId>,
}

impl Default for Users {
    fn default() -> Users {
        Users { users: BTreeMap::new(), next_id: 1, tombstones: Tombstones::default() }
    }
}

impl Users {
    /// No user was ever created (the image then keeps its earlier layout).
    pub fn is_pristine(&self) -> bool {
        *self == Users::default()
    }

    /// Whether any user exists (authentication is on once one does).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user called `name` and its hash (for the runtime's verifier).
    pub fn get(&self, name: &str) -> Option<(&UserInfo, &PasswordHash)> {
        self.users.get(name).map(|u| (&u.info, &u.hash))
    }

    /// Every user, in name order.
    pub fn list(&self) -> impl Iterator<Item = &UserInfo> {
        self.users.values().map(|u| &u.info)
    }

    /// Every user with its hash, in name order (for a runtime's password checks).
    pub fn with_hashes(&self) -> impl Iterator<Item = (&UserInfo, &PasswordHash)> {
        self.users.values().map(|u| (&u.info, &u.hash))
    }

    /// The next incarnation id (what a proposer records as `seen_next_id`).
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    pub(super) fn create(
        &mut self,
        name: String,
        hash: PasswordHash,
        grants: Vec<Grant>,
        now_ms: u64,
        seen_next_id: u64,
    ) -> Result<UserInfo, ClientError> {
        validate_user_name(&name).map_err(ClientError::BadRequest)?;
        validate_grants(&grants).map_err(ClientError::BadRequest)?;
        if self.users.contains_key(&name) {
            return Err(ClientError::Conflict(format!("user `{name}` already exists")));
        }
        if self.tombstones.is_late(&name, seen_next_id) {
            return Err(ClientError::Unavailable(format!(
                "user `{name}` was created and deleted after the node that took this request \
                 last looked; nothing was created: retry"
            )));
        }
        if self.users.len() >= MAX_USERS {
            return Err(ClientError::Conflict(format!("the cluster holds {MAX_USERS} users")));
        }
        let id = UserId(self.next_id);
        self.next_id += 1;
        let info =
            UserInfo { name: name.clone(), id, grants, created_ms: now_ms, updated_ms: now_ms };
        self.users.insert(name, User { info: info.clone(), hash });
        Ok(info)
    }

    pub(super) fn change(
        &mut self,
        name: &str,
        id: UserId,
        change: UserChange,
        now_ms: u64,
    ) -> Result<UserInfo, ClientError> {
        if let UserChange::Grants(grants) = &change {
            validate_grants(grants).map_err(ClientError::BadRequest)?;
        }
        let user = self.current(name, id)?;
        match change {
            UserChange::Grants(grants) => user.info.grants = grants,
            UserChange::Password(hash) => user.hash = hash,
        }
        // Strictly later than the previous change: a node waiting to show this change knows it
        // by this number (`updated_ms` is a version as well as a time).
        user.info.updated_ms = (user.info.updated_ms + 1).max(now_ms);
        Ok(user.info.clone())
    }

    pub(super) fn delete(&mut self, name: &str, id: UserId) -> Result<UserInfo, ClientError> {
        self.current(name, id)?;
        let user = self.users.remove(name).expect("invariant: found just above");
        self.tombstones.bury(name, id);
        Ok(user.info)
    }

    /// Incarnation `id` of `name`, if it is still the current one.
    fn current(&mut self, name: &str, id: UserId) -> Result<&mut User, ClientError> {
        match self.users.get_mut(name) {
            Some(user) if user.info.id == id => Ok(user),
            Some(_) => Err(ClientError::NotFound(format!(
                "user `{name}` (incarnation {}) not found: it was deleted and created again",
                id.0
            ))),
            None => Err(ClientError::NotFound(format!("user `{name}` not found"))),
        }
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.next_id);
        put_u32(out, self.users.len() as u32);
        for user in self.users.values() {
            let info = &user.info;
            put_str(out, &info.name);
            put_u64(out, info.id.0);
            put_str(out, user.hash.expose());
            put_u64(out, info.created_ms);
            put_u64(out, info.updated_ms);
            encode_grants(out, &info.grants);
        }
        self.tombstones.encode(out);
    }

    /// Inverse of `encode` (the image's canonical check re-encodes the whole state).
    pub(super) fn decode(r: &mut Reader<'_>) -> Option<Users> {
        let mut users = Users { next_id: r.u64()?, ..Users::default() };
        for _ in 0..r.u32()? {
            let name = get_str(r)?;
            let id = UserId(r.u64()?);
            let hash = PasswordHash::new(get_str(r)?).ok()?;
            let (created_ms, updated_ms) = (r.u64()?, r.u64()?);
            let grants = decode_grants(r)?;
            let info = UserInfo { name: name.clone(), id, grants, created_ms, updated_ms };
            users.users.insert(name, User { info, hash });
        }
        users.tombstones = Tombstones::decode(r)?;
        Some(users)
    }
}

/// A user as answers show it (no hash), for a forwarded command's result.
pub(crate) fn encode_user_info(out: &mut Vec<u8>, info: &UserInfo) {
    put_str(out, &info.name);
    put_u64(out, info.id.0);
    put_u64(out, info.created_ms);
    put_u64(out, info.updated_ms);
    encode_grants(out, &info.grants);
}

/// Inverse of `encode_user_info`; `None` for a name no user could have.
pub(crate) fn decode_user_info(r: &mut Reader<'_>) -> Option<UserInfo> {
    let name = get_str(r)?;
    validate_user_name(&name).ok()?;
    let id = UserId(r.u64()?);
    let (created_ms, updated_ms) = (r.u64()?, r.u64()?);
    let grants = decode_grants(r)?;
    Some(UserInfo { name, id, grants, created_ms, updated_ms })
}

/// Grants as a count, then each one's action code and pattern text.
fn encode_grants(out: &mut Vec<u8>, grants: &[Grant]) {
    put_u32(out, grants.len() as u32);
    for grant in grants {
        out.push(grant.action.code());
        put_str(out, &grant.topics.to_string());
    }
}

/// Inverse of `encode_grants`; `None` for an unknown action or a pattern that does not parse.
fn decode_grants(r: &mut Reader<'_>) -> Option<Vec<Grant>> {
    let count = r.u32()? as usize;
    if count > crate::constants::MAX_GRANTS_PER_USER {
        return None;
    }
    let mut grants = Vec::with_capacity(count);
    for _ in 0..count {
        let action = Action::from_code(get_u8(r)?)?;
        let topics = TopicPattern::parse(&get_str(r)?).ok()?;
        grants.push(Grant { action, topics });
    }
    Some(grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(text: &str) -> PasswordHash {
        PasswordHash::new(text.to_string()).expect("valid")
    }

    fn grants(action: Action, pattern: &str) -> Vec<Grant> {
        vec![Grant { action, topics: TopicPattern::parse(pattern).expect("valid") }]
    }

    #[test]
    fn a_user_is_created_changed_and_deleted_by_incarnation() {
        let mut users = Users::default();
        let seen = users.next_id();
        let alice = users
            .create("alice".into(), hash("h1"), grants(Action::Produce, "orders.*"), 10, seen)
            .expect("created");
        assert_eq!(alice.id, UserId(1));
        assert!(matches!(
            users.create("alice".into(), hash("h2"), vec![], 11, users.next_id()),
            Err(ClientError::Conflict(_))
        ));
        let changed = users
            .change("alice", alice.id, UserChange::Grants(grants(Action::Admin, "*")), 20)
            .expect("changed");
        assert_eq!((changed.created_ms, changed.updated_ms), (10, 20));
        users.change("alice", alice.id, UserChange::Password(hash("h3")), 30).expect("changed");
        assert_eq!(users.get("alice").map(|(_, h)| h.expose()), Some("h3"));
        users.delete("alice", alice.id).expect("deleted");
        assert!(users.get("alice").is_none() && users.is_empty() && !users.is_pristine());
        // A create that looked before the delete is late: refused, not a resurrection.
        assert!(matches!(
            users.create("alice".into(), hash("h4"), vec![], 40, seen),
            Err(ClientError::Unavailable(_))
        ));
        let again = users
            .create("alice".into(), hash("h5"), vec![], 50, users.next_id())
            .expect("created again");
        assert_eq!(again.id, UserId(2));
        // Commands naming the first incarnation touch nothing of the second.
        let stale = UserChange::Grants(grants(Action::Admin, "*"));
        assert!(matches!(
            users.change("alice", alice.id, stale, 60),
            Err(ClientError::NotFound(_))
        ));
        assert!(matches!(users.delete("alice", alice.id), Err(ClientError::NotFound(_))));
        assert_eq!(users.get("alice").map(|(u, _)| u.grants.len()), Some(0));
    }

    #[test]
    fn bad_names_and_grants_are_refused_at_apply() {
        let mut users = Users::default();
        let next = users.next_id();
        assert!(users.create("a b".into(), hash("h"), vec![], 0, next).is_err());
        let twice = [grants(Action::Produce, "x"), grants(Action::Produce, "x")].concat();
        assert!(users.create("bob".into(), hash("h"), twice, 0, next).is_err());
        assert!(users.is_pristine(), "nothing was applied");
    }

    #[test]
    fn the_table_round_trips_and_bad_grant_bytes_are_refused() {
        let mut users = Users::default();
        let next = users.next_id();
        users.create("carol".into(), hash("hc"), grants(Action::Consume, "a*"), 1, next).unwrap();
        let next = users.next_id();
        let dave = users.create("dave".into(), hash("hd"), vec![], 2, next).unwrap();
        users.delete("dave", dave.id).unwrap();
        let mut out = Vec::new();
        users.encode(&mut out);
        let decoded = Users::decode(&mut Reader::new(&out)).expect("decodes");
        assert_eq!(decoded, users);
        let mut bad = Vec::new();
        put_u32(&mut bad, 1);
        bad.push(9); // no such action
        put_str(&mut bad, "*");
        assert!(decode_grants(&mut Reader::new(&bad)).is_none());
    }
}
