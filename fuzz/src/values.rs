//! Builders of structured values from fuzzer bytes (`arbitrary::Unstructured`) for the targets
//! that check `decode(encode(x)) == x`, kept here when more than one target needs them.

use arbitrary::{Arbitrary, Unstructured};
use narad_core::access::{Action, Grant, PasswordHash, Principal, TopicPattern, UserInfo};
use narad_core::meta::MetaCommand;
use narad_core::meta::users::{UserChange, UserCommand, UserId};
use narad_core::{NodeId, TopicChange, TopicId};

/// Topic names a state target draws from, so creates and deletes meet each other.
const NAMES: [&str; 4] = ["a", "orders", "t.1", "x-y_z"];

/// A `retention_ms` a topic can have: none, or at most `MAX_RETENTION_MS` (larger values are
/// refused with 400 before any encoding sees them; `u64::MAX` is the encodings' "none").
pub fn retention(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<u64>> {
    let max = narad_core::constants::MAX_RETENTION_MS;
    Ok(if u.arbitrary()? { Some(u.int_in_range(0..=max)?) } else { None })
}

/// A `retention_bytes` a topic can have: none, or at most `MAX_RETENTION_BYTES` (like
/// `retention`: larger values never reach an encoding).
pub fn retention_bytes(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<u64>> {
    let max = narad_core::constants::MAX_RETENTION_BYTES;
    Ok(if u.arbitrary()? { Some(u.int_in_range(0..=max)?) } else { None })
}

/// A topic update with fields that can be encoded (each may be absent).
pub fn change(u: &mut Unstructured<'_>) -> arbitrary::Result<TopicChange> {
    let retention_bytes = if u.arbitrary()? { Some(retention_bytes(u)?) } else { None };
    Ok(TopicChange { retention_ms: retention(u)?, retention_bytes })
}

/// A metastore command of any kind with fields from the input. With `short_names` its topic
/// names come from a few valid ones (so applying commands builds a state); without, any string.
pub fn command(u: &mut Unstructured<'_>, short_names: bool) -> arbitrary::Result<MetaCommand> {
    let name = |u: &mut Unstructured<'_>| -> arbitrary::Result<String> {
        if short_names { Ok((*u.choose(&NAMES)?).to_string()) } else { u.arbitrary() }
    };
    Ok(match u.int_in_range(0..=6u8)? {
        6 => MetaCommand::User(user_command(u, short_names)?),
        0 => MetaCommand::CreateTopic {
            name: name(u)?,
            partitions: u.arbitrary()?,
            retention_ms: retention(u)?,
            retention_bytes: retention_bytes(u)?,
            now_ms: u.arbitrary()?,
            seen_next_id: u.arbitrary()?,
            queue: Default::default(),
        },
        1 => MetaCommand::DeleteTopic { name: name(u)?, id: TopicId(u.arbitrary()?) },
        2 => MetaCommand::Heartbeat {
            node: NodeId(u.arbitrary()?),
            http_addr: String::arbitrary(u)?,
            cluster_addr: String::arbitrary(u)?,
            now_ms: u.arbitrary()?,
        },
        3 => {
            MetaCommand::MarkDead { node: NodeId(u.arbitrary()?), seen_heartbeats: u.arbitrary()? }
        }
        4 => MetaCommand::MarkAlive { node: NodeId(u.arbitrary()?) },
        _ => MetaCommand::UpdateTopic {
            name: name(u)?,
            id: TopicId(u.arbitrary()?),
            change: change(u)?,
        },
    })
}

/// User names a state target draws from, so creates, changes and deletes meet each other.
const USER_NAMES: [&str; 3] = ["alice", "bob", "ops@eu"];
/// Topic patterns grants draw from.
const PATTERNS: [&str; 5] = ["*", "orders.*", "orders", "a", "t*"];

/// A user command (any kind) with fields from the input; see `command` for `short_names`.
pub fn user_command(u: &mut Unstructured<'_>, short_names: bool) -> arbitrary::Result<UserCommand> {
    let name = if short_names { (*u.choose(&USER_NAMES)?).to_string() } else { u.arbitrary()? };
    let id = UserId(if short_names { u.int_in_range(0..=4)? } else { u.arbitrary()? });
    Ok(match u.int_in_range(0..=3u8)? {
        0 => UserCommand::Create {
            name,
            hash: hash(u)?,
            grants: grants(u)?,
            now_ms: u.arbitrary()?,
            seen_next_id: u.arbitrary()?,
        },
        1 => UserCommand::Change {
            name,
            id,
            change: UserChange::Grants(grants(u)?),
            now_ms: u.arbitrary()?,
        },
        2 => UserCommand::Change {
            name,
            id,
            change: UserChange::Password(hash(u)?),
            now_ms: u.arbitrary()?,
        },
        _ => UserCommand::Delete { name, id },
    })
}

/// Who a forwarded request is for: trusted, or one of the names above with any incarnation.
pub fn principal(u: &mut Unstructured<'_>) -> arbitrary::Result<Principal> {
    Ok(if u.arbitrary()? {
        Principal::Trusted
    } else {
        let name = (*u.choose(&USER_NAMES)?).to_string();
        Principal::User { name, id: UserId(u.arbitrary()?) }
    })
}

/// A user as an admin result shows it.
pub fn user_info(u: &mut Unstructured<'_>) -> arbitrary::Result<UserInfo> {
    Ok(UserInfo {
        name: (*u.choose(&USER_NAMES)?).to_string(),
        id: UserId(u.arbitrary()?),
        grants: grants(u)?,
        created_ms: u.arbitrary()?,
        updated_ms: u.arbitrary()?,
    })
}

/// Up to 4 grants on the patterns above.
pub fn grants(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<Grant>> {
    let mut grants = Vec::new();
    for _ in 0..u.int_in_range(0..=4u8)? {
        let action = *u.choose(&Action::ALL)?;
        let topics = TopicPattern::parse(u.choose(&PATTERNS)?).expect("the patterns above parse");
        grants.push(Grant { action, topics });
    }
    Ok(grants)
}

/// A hash string the encoding can carry (1 to 512 bytes).
fn hash(u: &mut Unstructured<'_>) -> arbitrary::Result<PasswordHash> {
    let text: String = u.arbitrary()?;
    let text = if text.is_empty() { "h".to_string() } else { text };
    let mut end = text.len().min(PasswordHash::MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok(PasswordHash::new(text[..end].to_string()).expect("1 to 512 bytes"))
}
