//! The metastore's replicated state machine: topics with their incarnation ids and partition
//! owners, and the cluster's members with their liveness.
//!
//! Every replica applies the same committed commands in the same order, so everything here is a
//! pure function of the command sequence: validation happens at *apply* time (two proposals for
//! the same name race in the log, and the log decides), maps are `BTreeMap`s, and no clock is read
//! (times travel inside the commands). The byte encoding of the whole state (the snapshot image)
//! lives here too, next to the fields it encodes.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::names::validate_name;
use super::retention::{validate_bytes, validate_change, validate_retention};
use crate::api::{ClientError, QueueSettings, TopicChange, TopicInfo};
use crate::codec::Reader;
use crate::constants::{DEFAULT_PARTITIONS, MAX_PARTITIONS};
use crate::ids::{NodeId, PartitionKey, TopicId};

#[cfg(test)]
use super::tombstones::MAX_TOMBSTONES;
use super::tombstones::Tombstones;
use super::users::{UserCommand, Users};

use super::command::{
    Applied, MetaCommand, NONE_U64, get_str, get_u8, optional_u64, put_str, put_u32, put_u64,
};

/// One member of the cluster as the replicated state knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    pub id: NodeId,
    pub http_addr: String,
    pub cluster_addr: String,
    pub alive: bool,
    /// The member's own clock at its last applied heartbeat (informational: liveness verdicts use
    /// the leader's clock, so skew between nodes cannot kill anyone).
    pub last_heartbeat_ms: u64,
    /// Heartbeats applied so far (guards `MarkDead` against a racing heartbeat).
    pub heartbeats: u64,
    /// Partitions this member owns, over every live topic.
    pub partitions_owned: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    http_addr: String,
    cluster_addr: String,
    alive: bool,
    last_heartbeat_ms: u64,
    heartbeats: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Topic {
    info: TopicInfo,
    /// Partition `p` is owned by `owners[p % owners.len()]` (the live members at creation,
    /// rotated to where the cluster-wide round-robin stood). Sticky: never rewritten.
    owners: Vec<NodeId>,
}

/// The replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaState {
    topics: BTreeMap<String, Topic>,
    names: BTreeMap<TopicId, String>,
    /// Next incarnation id; every id below it was issued once.
    next_topic_id: u64,
    /// Where the round-robin over live members continues at the next topic creation.
    cursor: u64,
    members: BTreeMap<NodeId, Member>,
    /// The last deleted incarnation of each name, so that a create can tell whether the name
    /// changed after its proposer looked (see `MetaCommand::CreateTopic`).
    tombstones: Tombstones<TopicId>,
    users: Users,
}

impl MetaState {
    pub fn new() -> MetaState {
        MetaState { next_topic_id: 1, ..MetaState::default() }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name).map(|t| &t.info)
    }

    /// The id the next topic created will get.
    pub fn next_topic_id(&self) -> u64 {
        self.next_topic_id
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<&TopicInfo> {
        self.names.get(&id).and_then(|name| self.topic(name))
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicInfo> {
        self.topics.values().map(|t| &t.info)
    }

    /// Topics whose names sort after `after` (every topic without it), in name order.
    pub fn topics_after(&self, after: Option<&str>) -> impl Iterator<Item = &TopicInfo> {
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.topics.range::<str, _>((start, Bound::Unbounded)).map(|(_, t)| &t.info)
    }

    pub fn owner(&self, key: PartitionKey) -> Option<NodeId> {
        let topic = self.topics.get(self.names.get(&key.topic)?)?;
        if key.partition >= topic.info.partitions || topic.owners.is_empty() {
            return None;
        }
        Some(topic.owners[key.partition as usize % topic.owners.len()])
    }

    /// True when `id` was issued and is no longer live.
    pub fn is_gone(&self, id: TopicId) -> bool {
        !self.names.contains_key(&id) && id.0 > 0 && id.0 < self.next_topic_id
    }

    pub fn is_alive(&self, node: NodeId) -> bool {
        self.members.get(&node).is_some_and(|m| m.alive)
    }

    /// Heartbeats applied for `node`, if it is a member.
    pub fn heartbeats(&self, node: NodeId) -> Option<u64> {
        self.members.get(&node).map(|m| m.heartbeats)
    }

    /// Ids of the members currently marked alive, ascending.
    pub fn alive_members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().filter(|(_, m)| m.alive).map(|(id, _)| *id)
    }

    pub fn members(&self) -> Vec<MemberInfo> {
        let mut owned: BTreeMap<NodeId, u32> = BTreeMap::new();
        for topic in self.topics.values() {
            for p in 0..topic.info.partitions {
                *owned.entry(topic.owners[p as usize % topic.owners.len()]).or_default() += 1;
            }
        }
        self.members
            .iter()
            .map(|(id, m)| MemberInfo {
                id: *id,
                http_addr: m.http_addr.clone(),
                cluster_addr: m.cluster_addr.clone(),
                alive: m.alive,
                last_heartbeat_ms: m.last_heartbeat_ms,
                heartbeats: m.heartbeats,
                partitions_owned: owned.get(id).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Applies one committed command. Deterministic: the same state and command give the same
    /// result on every replica.
    pub fn apply(&mut self, command: MetaCommand) -> Result<Applied, ClientError> {
        match command {
            MetaCommand::CreateTopic {
                name,
                partitions,
                retention_ms,
                retention_bytes,
                queue,
                now_ms,
                seen_next_id,
            } => {
                self.refuse_late_create(&name, seen_next_id)?;
                validate_bytes(retention_bytes)?;
                self.validate_queue(&name, &queue)?;
                let info = self.create(name, partitions, retention_ms, now_ms)?;
                Ok(Applied::Created(self.set_extras(&info, retention_bytes, queue)))
            }
            MetaCommand::DeleteTopic { name, id } => self.delete(&name, id),
            MetaCommand::UpdateTopic { name, id, change } => self.update(&name, id, change),
            MetaCommand::Heartbeat { node, http_addr, cluster_addr, now_ms } => {
                Ok(self.heartbeat(node, http_addr, cluster_addr, now_ms))
            }
            MetaCommand::MarkDead { node, seen_heartbeats } => {
                Ok(self.mark_dead(node, seen_heartbeats))
            }
            MetaCommand::MarkAlive { node } => Ok(self.set_alive(node, true)),
            MetaCommand::User(command) => self.apply_user(command),
        }
    }

    fn apply_user(&mut self, command: UserCommand) -> Result<Applied, ClientError> {
        Ok(match command {
            UserCommand::Create { name, hash, grants, now_ms, seen_next_id } => {
                Applied::UserCreated(self.users.create(name, hash, grants, now_ms, seen_next_id)?)
            }
            UserCommand::Change { name, id, change, now_ms } => {
                Applied::UserChanged(self.users.change(&name, id, change, now_ms)?)
            }
            UserCommand::Delete { name, id } => Applied::UserDeleted(self.users.delete(&name, id)?),
        })
    }

    /// The users (docs/design.md §8).
    pub fn users(&self) -> &Users {
        &self.users
    }

    fn create(
        &mut self,
        name: String,
        partitions: Option<u32>,
        retention_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<TopicInfo, ClientError> {
        validate_name(&name)?;
        let partitions = partitions.unwrap_or(DEFAULT_PARTITIONS);
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(ClientError::BadRequest(format!(
                "partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"
            )));
        }
        validate_retention(retention_ms)?;
        if self.topics.contains_key(&name) {
            return Err(ClientError::Conflict(format!("topic `{name}` already exists")));
        }
        // Names that differ only in letter case are one name to a reader (the original's rule).
        if let Some(other) = self.topics.keys().find(|k| k.eq_ignore_ascii_case(&name)) {
            return Err(ClientError::Conflict(format!(
                "topic `{name}` differs only in letter case from the existing topic `{other}`"
            )));
        }
        let mut owners: Vec<NodeId> = self.alive_members().collect();
        if owners.is_empty() {
            return Err(ClientError::Unavailable(
                "no live member to own the topic's partitions".into(),
            ));
        }
        let start = (self.cursor % owners.len() as u64) as usize;
        owners.rotate_left(start);
        self.cursor = self.cursor.wrapping_add(u64::from(partitions));
        let info = TopicInfo {
            name: name.clone(),
            id: TopicId(self.next_topic_id),
            partitions,
            retention_ms,
            retention_bytes: None,
            created_ms: now_ms,
            queue: QueueSettings::default(),
        };
        self.next_topic_id += 1;
        self.names.insert(info.id, name.clone());
        self.topics.insert(name, Topic { info: info.clone(), owners });
        Ok(info)
    }

    /// Sets the size limit and queue settings of the live topic `info` names; the topic as it
    /// is now.
    fn set_extras(
        &mut self,
        info: &TopicInfo,
        retention_bytes: Option<u64>,
        queue: QueueSettings,
    ) -> TopicInfo {
        let topic = self.topics.get_mut(&info.name).expect("invariant: just created");
        topic.info.retention_bytes = retention_bytes;
        topic.info.queue = queue;
        topic.info.clone()
    }

    /// A topic's queue settings must be valid, and its dead-letter topic must exist already (and
    /// be another topic): a message must have somewhere to go the first time it is moved.
    fn validate_queue(&self, name: &str, queue: &QueueSettings) -> Result<(), ClientError> {
        queue.validate()?;
        let Some(dead) = &queue.dead_letter else {
            return Ok(());
        };
        if dead.topic == name {
            return Err(ClientError::BadRequest(format!(
                "dead_letter_topic `{name}` is the topic itself"
            )));
        }
        if !self.topics.contains_key(&dead.topic) {
            return Err(ClientError::BadRequest(format!(
                "dead_letter_topic `{}` does not exist: create it first",
                dead.topic
            )));
        }
        Ok(())
    }

    /// Changes the retention of incarnation `id` of `name` if it is still the current one
    /// (checked like a delete: a late update never touches a later incarnation).
    fn update(
        &mut self,
        name: &str,
        id: TopicId,
        change: TopicChange,
    ) -> Result<Applied, ClientError> {
        validate_change(&change)?;
        let topic = match self.topics.get_mut(name) {
            Some(topic) if topic.info.id == id => topic,
            Some(topic) => {
                return Err(ClientError::NotFound(format!(
                    "topic `{name}` (incarnation {}) not found: it was deleted; the name now \
                     holds incarnation {}",
                    id.0, topic.info.id.0
                )));
            }
            None => return Err(ClientError::NotFound(format!("topic `{name}` not found"))),
        };
        topic.info = change.applied_to(&topic.info);
        Ok(Applied::Updated(topic.info.clone()))
    }

    /// A create whose proposer looked before an incarnation of `name` was deleted (or before
    /// the oldest deletion remembered) is stale: answered "retry", nothing changes. A name that
    /// exists is left to `create` (409 either way).
    fn refuse_late_create(&self, name: &str, seen_next_id: u64) -> Result<(), ClientError> {
        if self.topics.contains_key(name) {
            return Ok(());
        }
        if self.tombstones.is_late(name, seen_next_id) {
            return Err(ClientError::Unavailable(format!(
                "topic `{name}` was created and deleted after the node that took this request \
                 last looked (its catalogue was behind, or the request reached the log late); \
                 nothing was created: retry"
            )));
        }
        Ok(())
    }

    /// Deletes incarnation `id` of `name` if it is still the current one. Anything else (the
    /// name is gone, or now holds a later incarnation than the proposer saw) changes nothing and
    /// answers "not found": that incarnation no longer exists.
    fn delete(&mut self, name: &str, id: TopicId) -> Result<Applied, ClientError> {
        match self.topics.get(name) {
            Some(topic) if topic.info.id == id => {}
            Some(topic) => {
                return Err(ClientError::NotFound(format!(
                    "topic `{name}` (incarnation {}) not found: it was already deleted; the name \
                     now holds incarnation {}",
                    id.0, topic.info.id.0
                )));
            }
            None => return Err(ClientError::NotFound(format!("topic `{name}` not found"))),
        }
        let topic = self.topics.remove(name).expect("invariant: matched just above");
        self.names.remove(&topic.info.id);
        self.tombstones.bury(name, topic.info.id);
        Ok(Applied::Deleted(topic.info))
    }

    fn heartbeat(
        &mut self,
        node: NodeId,
        http_addr: String,
        cluster_addr: String,
        now_ms: u64,
    ) -> Applied {
        let member = self.members.entry(node).or_insert_with(|| Member {
            http_addr: String::new(),
            cluster_addr: String::new(),
            alive: false,
            last_heartbeat_ms: 0,
            heartbeats: 0,
        });
        member.http_addr = http_addr;
        member.cluster_addr = cluster_addr;
        member.last_heartbeat_ms = now_ms;
        member.heartbeats += 1;
        if member.alive {
            Applied::Heartbeat { node }
        } else {
            member.alive = true;
            Applied::Liveness { node, alive: true }
        }
    }

    fn mark_dead(&mut self, node: NodeId, seen_heartbeats: u64) -> Applied {
        match self.members.get(&node) {
            Some(m) if m.alive && m.heartbeats == seen_heartbeats => self.set_alive(node, false),
            _ => Applied::Unchanged,
        }
    }

    fn set_alive(&mut self, node: NodeId, alive: bool) -> Applied {
        match self.members.get_mut(&node) {
            Some(m) if m.alive != alive => {
                m.alive = alive;
                Applied::Liveness { node, alive }
            }
            _ => Applied::Unchanged,
        }
    }
}

// ---- Image encoding ------------------------------------------------------------------------

/// The image layout of builds before `retention_bytes` existed.
const IMAGE_V2: u8 = 2;
/// `IMAGE_V2` with each topic's `retention_bytes` after its `created_ms`.
const IMAGE_V3: u8 = 3;
/// `IMAGE_V3` with each topic's queue settings after its `retention_bytes`.
const IMAGE_V4: u8 = 4;
/// `IMAGE_V4` (every topic in its layout) with the users after the tombstones; written once a
/// user was ever created.
const IMAGE_V5: u8 = 5;

impl MetaState {
    /// The whole state as bytes (a snapshot image), in the oldest layout that holds it: v2 until
    /// some topic has a `retention_bytes`, so a snapshot stays readable by the build before the
    /// field existed for as long as nobody uses it. Decoding stays canonical: a v3 image none of
    /// whose topics has a size limit is not what `encode` writes, and is refused.
    pub fn encode(&self) -> Vec<u8> {
        let v5 = !self.users.is_pristine();
        let v4 = v5 || self.topics.values().any(|t| !t.info.queue.is_default());
        let v3 = v4 || self.topics.values().any(|t| t.info.retention_bytes.is_some());
        let mut out = vec![if v5 {
            IMAGE_V5
        } else if v4 {
            IMAGE_V4
        } else if v3 {
            IMAGE_V3
        } else {
            IMAGE_V2
        }];
        put_u64(&mut out, self.next_topic_id);
        put_u64(&mut out, self.cursor);
        put_u32(&mut out, self.topics.len() as u32);
        for topic in self.topics.values() {
            let info = &topic.info;
            put_str(&mut out, &info.name);
            put_u64(&mut out, info.id.0);
            put_u32(&mut out, info.partitions);
            put_u64(&mut out, info.retention_ms.unwrap_or(NONE_U64));
            put_u64(&mut out, info.created_ms);
            if v3 {
                put_u64(&mut out, info.retention_bytes.unwrap_or(NONE_U64));
            }
            if v4 {
                info.queue.encode(&mut out);
            }
            put_u32(&mut out, topic.owners.len() as u32);
            for owner in &topic.owners {
                put_u32(&mut out, owner.0);
            }
        }
        put_u32(&mut out, self.members.len() as u32);
        for (id, m) in &self.members {
            put_u32(&mut out, id.0);
            put_str(&mut out, &m.http_addr);
            put_str(&mut out, &m.cluster_addr);
            out.push(u8::from(m.alive));
            put_u64(&mut out, m.last_heartbeat_ms);
            put_u64(&mut out, m.heartbeats);
        }
        self.tombstones.encode(&mut out);
        if v5 {
            self.users.encode(&mut out);
        }
        out
    }

    /// Inverse of `encode`; `None` for bytes it did not produce (never panics). Only canonical
    /// bytes decode: an image listing a name, id or member twice (or out of order) would
    /// otherwise decode to a state that re-encodes differently.
    pub fn decode(bytes: &[u8]) -> Option<MetaState> {
        let state = MetaState::decode_fields(bytes)?;
        (state.encode() == bytes).then_some(state)
    }

    fn decode_fields(bytes: &[u8]) -> Option<MetaState> {
        let mut r = Reader::new(bytes);
        let layout = get_u8(&mut r)?;
        if !(IMAGE_V2..=IMAGE_V5).contains(&layout) {
            return None;
        }
        let mut state =
            MetaState { next_topic_id: r.u64()?, cursor: r.u64()?, ..MetaState::default() };
        for _ in 0..r.u32()? {
            let topic = decode_topic(&mut r, layout)?;
            let name = topic.info.name.clone();
            state.names.insert(topic.info.id, name.clone());
            state.topics.insert(name, topic);
        }
        for _ in 0..r.u32()? {
            let id = NodeId(r.u32()?);
            let member = Member {
                http_addr: get_str(&mut r)?,
                cluster_addr: get_str(&mut r)?,
                alive: get_u8(&mut r)? != 0,
                last_heartbeat_ms: r.u64()?,
                heartbeats: r.u64()?,
            };
            state.members.insert(id, member);
        }
        state.tombstones = Tombstones::decode(&mut r)?;
        if layout >= IMAGE_V5 {
            state.users = Users::decode(&mut r)?;
        }
        r.rest().is_empty().then_some(state)
    }
}

/// One topic of an image in `layout` (v3 and later: with its `retention_bytes`; v4: with its
/// queue settings).
fn decode_topic(r: &mut Reader<'_>, layout: u8) -> Option<Topic> {
    let name = get_str(r)?;
    let id = TopicId(r.u64()?);
    let partitions = r.u32()?;
    let retention_ms = optional_u64(r)?;
    let created_ms = r.u64()?;
    let retention_bytes = if layout >= IMAGE_V3 { optional_u64(r)? } else { None };
    let queue =
        if layout >= IMAGE_V4 { QueueSettings::decode(r)? } else { QueueSettings::default() };
    let count = r.u32()?;
    if count == 0 {
        return None;
    }
    // No capacity from untrusted bytes: a short buffer ends the loop at its first missing owner.
    let mut owners = Vec::new();
    for _ in 0..count {
        owners.push(NodeId(r.u32()?));
    }
    let info = TopicInfo { name, id, partitions, retention_ms, retention_bytes, created_ms, queue };
    Some(Topic { info, owners })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constants::{MAX_RETENTION_MS, MIN_RETENTION_BYTES};
    use crate::meta::command::{CMD_CREATE_QUEUE, decode_command, encode_command};

    fn update(
        name: &str,
        id: u64,
        retention_ms: Option<u64>,
        retention_bytes: Option<Option<u64>>,
    ) -> MetaCommand {
        let change = TopicChange { retention_ms, retention_bytes };
        MetaCommand::UpdateTopic { name: name.into(), id: TopicId(id), change }
    }

    fn heartbeat(node: u32) -> MetaCommand {
        MetaCommand::Heartbeat {
            node: NodeId(node),
            http_addr: format!("127.0.0.1:{}", 7940 + node),
            cluster_addr: format!("127.0.0.1:{}", 8940 + node),
            now_ms: 5,
        }
    }

    /// A create whose proposer had seen every incarnation so far (never stale).
    fn create(name: &str, partitions: u32) -> MetaCommand {
        MetaCommand::CreateTopic {
            name: name.into(),
            partitions: Some(partitions),
            retention_ms: None,
            retention_bytes: None,
            now_ms: 7,
            seen_next_id: u64::MAX,
            queue: Default::default(),
        }
    }

    #[test]
    fn round_robin_over_live_members_continues_across_topics_and_is_sticky() {
        let mut state = MetaState::new();
        for node in [3, 1, 2] {
            state.apply(heartbeat(node)).unwrap();
        }
        state.apply(create("a", 4)).unwrap();
        let a = state.topic("a").unwrap().id;
        let owners = |s: &MetaState, t, n| -> Vec<u32> {
            (0..n).map(|p| s.owner(PartitionKey { topic: t, partition: p }).unwrap().0).collect()
        };
        assert_eq!(owners(&state, a, 4), [1, 2, 3, 1]);
        let dead = state.apply(MetaCommand::MarkDead { node: NodeId(2), seen_heartbeats: 1 });
        assert_eq!(dead, Ok(Applied::Liveness { node: NodeId(2), alive: false }));
        state.apply(create("b", 3)).unwrap();
        let b = state.topic("b").unwrap().id;
        // The cursor stood at 4; over the live members [1, 3] that starts at 1.
        assert_eq!(owners(&state, b, 3), [1, 3, 1]);
        assert_eq!(owners(&state, a, 4), [1, 2, 3, 1], "sticky");
        assert_eq!(state.owner(PartitionKey { topic: a, partition: 4 }), None);
    }

    #[test]
    fn validation_happens_at_apply() {
        let mut state = MetaState::new();
        assert!(matches!(state.apply(create("t", 1)), Err(ClientError::Unavailable(_))));
        state.apply(heartbeat(1)).unwrap();
        assert!(matches!(state.apply(create("a/b", 1)), Err(ClientError::BadRequest(_))));
        assert!(matches!(state.apply(create("t", 0)), Err(ClientError::BadRequest(_))));
        assert!(matches!(state.apply(create("t", 4097)), Err(ClientError::BadRequest(_))));
        state.apply(create("t", 1)).unwrap();
        assert!(matches!(state.apply(create("t", 1)), Err(ClientError::Conflict(_))));
        let upper = state.apply(create("T", 1));
        assert!(
            matches!(&upper, Err(ClientError::Conflict(m)) if m.contains("differs only in letter case")),
            "{upper:?}"
        );
        let gone = state.topic("t").unwrap().id;
        let delete = MetaCommand::DeleteTopic { name: "t".into(), id: gone };
        assert!(matches!(state.apply(delete.clone()), Ok(Applied::Deleted(_))));
        assert!(matches!(state.apply(delete), Err(ClientError::NotFound(_))));
        assert!(state.is_gone(gone));
        assert!(!state.is_gone(TopicId(gone.0 + 1)), "never issued");
        assert!(!state.is_gone(TopicId(0)));
    }

    /// C4 (sim seeds 0x3fe5, 0x8e1c): a delete of `t` held on a clogged link reached the log
    /// after the client's retry had deleted `t` and `t` had been created again; applied by name
    /// it deleted the new incarnation. It names the incarnation now, and a stale one is a no-op.
    #[test]
    fn a_late_delete_of_an_earlier_incarnation_changes_nothing() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("t", 2)).unwrap();
        let first = state.topic("t").unwrap().id;
        let delete_first = MetaCommand::DeleteTopic { name: "t".into(), id: first };
        assert!(
            matches!(state.apply(delete_first.clone()), Ok(Applied::Deleted(t)) if t.id == first)
        );
        state.apply(create("t", 3)).unwrap();
        let second = state.topic("t").unwrap().id;
        assert_ne!(first, second);
        let before = state.clone();
        // The late original and a duplicate of it: both refused, nothing changes.
        for _ in 0..2 {
            let late = state.apply(delete_first.clone());
            assert!(matches!(late, Err(ClientError::NotFound(_))), "{late:?}");
            assert_eq!(state, before);
        }
        assert_eq!(state.topic("t").map(|t| t.id), Some(second));
        assert!(!state.is_gone(second));
        // An id that was never issued is refused the same way.
        let unknown = MetaCommand::DeleteTopic { name: "t".into(), id: TopicId(99) };
        assert!(matches!(state.apply(unknown), Err(ClientError::NotFound(_))));
        let current = MetaCommand::DeleteTopic { name: "t".into(), id: second };
        assert!(matches!(state.apply(current), Ok(Applied::Deleted(t)) if t.id == second));
        assert!(state.is_gone(first) && state.is_gone(second));
    }

    /// Issue 9, defect 5: `u64::MAX` is the encodings' "none", so a topic created with it came
    /// back with no retention at all. Values past `MAX_RETENTION_MS` are refused; the bound
    /// itself survives the state image and the command encoding.
    /// Found by reading (issue 9): an image listing one topic name twice decoded to a state with
    /// one topic, two ids and a re-encoding unlike the bytes read.
    #[test]
    fn an_image_naming_a_topic_twice_is_refused() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("a", 1)).unwrap();
        let image = state.encode();
        assert_eq!(MetaState::decode(&image).as_ref(), Some(&state));
        // Splice the one topic entry in twice and bump the topic count to 2.
        let entry_start = 1 + 8 + 8 + 4;
        let entry_len = 4 + 1 + 8 + 4 + 8 + 8 + 4 + 4;
        let mut twice = image[..entry_start].to_vec();
        twice[entry_start - 4..entry_start].copy_from_slice(&2u32.to_le_bytes());
        twice.extend_from_slice(&image[entry_start..entry_start + entry_len]);
        twice.extend_from_slice(&image[entry_start..]);
        assert!(MetaState::decode_fields(&twice).is_some(), "the splice is well formed");
        assert_eq!(MetaState::decode(&twice), None);
    }

    #[test]
    fn retention_past_the_bound_is_refused_and_the_bound_round_trips() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        let with = |retention_ms| MetaCommand::CreateTopic {
            name: "r".into(),
            partitions: Some(1),
            retention_ms: Some(retention_ms),
            retention_bytes: None,
            now_ms: 3,
            seen_next_id: state.next_topic_id(),
            queue: Default::default(),
        };
        for bad in [u64::MAX, MAX_RETENTION_MS + 1] {
            let refused = state.clone().apply(with(bad));
            assert!(matches!(refused, Err(ClientError::BadRequest(_))), "{refused:?}");
        }
        let command = with(MAX_RETENTION_MS);
        let bytes = super::super::command::encode_command(&command);
        assert_eq!(super::super::command::decode_command(&bytes), Some(command.clone()));
        state.apply(command).unwrap();
        assert_eq!(state.topic("r").unwrap().retention_ms, Some(MAX_RETENTION_MS));
        let image = MetaState::decode(&state.encode()).expect("image decodes");
        assert_eq!(image.topic("r").unwrap().retention_ms, Some(MAX_RETENTION_MS));
    }

    /// The mirror of C4: a create held on a clogged link (or duplicated) reaches the log after
    /// the name was created through another node and deleted again; applied as is, it would
    /// bring back a name the client deleted. Its proposer's view predates that incarnation.
    #[test]
    fn a_late_create_does_not_bring_back_a_deleted_name() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        let seen_then = state.next_topic_id();
        let late = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: Some(2),
            retention_ms: None,
            retention_bytes: None,
            now_ms: 3,
            seen_next_id: seen_then,
            queue: Default::default(),
        };
        state.apply(create("t", 1)).unwrap(); // the client's retry through another node
        let id = state.topic("t").unwrap().id;
        state.apply(MetaCommand::DeleteTopic { name: "t".into(), id }).unwrap();
        let before = state.clone();
        for _ in 0..2 {
            let refused = state.apply(late.clone());
            assert!(matches!(refused, Err(ClientError::Unavailable(_))), "{refused:?}");
            assert_eq!(state, before, "nothing changes");
        }
        assert!(state.topic("t").is_none());
        // A create proposed after the delete was seen goes through.
        let fresh = MetaCommand::CreateTopic {
            name: "t".into(),
            partitions: Some(2),
            retention_ms: None,
            retention_bytes: None,
            now_ms: 4,
            seen_next_id: state.next_topic_id(),
            queue: Default::default(),
        };
        assert!(matches!(state.apply(fresh), Ok(Applied::Created(_))));
        // Another name is not affected by t's history.
        let other = MetaCommand::CreateTopic {
            name: "u".into(),
            partitions: None,
            retention_ms: None,
            retention_bytes: None,
            now_ms: 5,
            seen_next_id: seen_then,
            queue: Default::default(),
        };
        assert!(matches!(state.apply(other), Ok(Applied::Created(_))));
        let image = state.encode();
        assert_eq!(MetaState::decode(&image).as_ref(), Some(&state), "tombstones are in the image");
    }

    #[test]
    fn tombstones_are_bounded_and_creates_older_than_the_oldest_are_refused() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        let seen_at_start = state.next_topic_id();
        for i in 0..(MAX_TOMBSTONES + 10) {
            let name = format!("t{i}");
            state.apply(create(&name, 1)).unwrap();
            let id = state.topic(&name).unwrap().id;
            state.apply(MetaCommand::DeleteTopic { name, id }).unwrap();
        }
        assert_eq!(state.tombstones.len(), MAX_TOMBSTONES);
        let ancient = |name: &str| MetaCommand::CreateTopic {
            name: name.into(),
            partitions: None,
            retention_ms: None,
            retention_bytes: None,
            now_ms: 9,
            seen_next_id: seen_at_start,
            queue: Default::default(),
        };
        // t0's tombstone was dropped; the floor still refuses its late create, and any other
        // create whose proposer looked that long ago.
        assert!(!state.tombstones.holds("t0"));
        assert!(matches!(state.apply(ancient("t0")), Err(ClientError::Unavailable(_))));
        assert!(matches!(state.apply(ancient("never-used")), Err(ClientError::Unavailable(_))));
        assert!(matches!(state.apply(create("never-used", 1)), Ok(Applied::Created(_))));
    }

    #[test]
    fn a_heartbeat_racing_a_dead_verdict_wins() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        let seen = state.heartbeats(NodeId(1)).unwrap();
        state.apply(heartbeat(1)).unwrap();
        let verdict = MetaCommand::MarkDead { node: NodeId(1), seen_heartbeats: seen };
        assert_eq!(state.apply(verdict), Ok(Applied::Unchanged));
        assert!(state.is_alive(NodeId(1)));
    }

    #[test]
    fn commands_and_images_round_trip_and_garbage_is_refused() {
        let commands = [
            create("x", 3),
            MetaCommand::CreateTopic {
                name: "y".into(),
                partitions: None,
                retention_ms: Some(60_000),
                retention_bytes: None,
                now_ms: 1,
                seen_next_id: 4,
                queue: Default::default(),
            },
            MetaCommand::DeleteTopic { name: "x".into(), id: TopicId(1) },
            heartbeat(2),
            MetaCommand::MarkDead { node: NodeId(2), seen_heartbeats: 9 },
            MetaCommand::MarkAlive { node: NodeId(2) },
            MetaCommand::CreateTopic {
                name: "z".into(),
                partitions: Some(1),
                retention_ms: Some(0),
                retention_bytes: Some(MIN_RETENTION_BYTES),
                now_ms: 2,
                seen_next_id: 5,
                queue: Default::default(),
            },
            update("z", 3, Some(60_000), Some(Some(MIN_RETENTION_BYTES * 2))),
            update("z", 3, None, Some(None)),
            update("z", 3, Some(1_000), None),
        ];
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        for command in commands {
            let bytes = encode_command(&command);
            assert_eq!(decode_command(&bytes), Some(command.clone()));
            for cut in 0..bytes.len() {
                assert_eq!(decode_command(&bytes[..cut]), None, "{command:?} cut at {cut}");
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert_eq!(decode_command(&longer), None);
            let _ = state.apply(command);
        }
        let image = state.encode();
        assert_eq!(MetaState::decode(&image), Some(state.clone()));
        for cut in 0..image.len() {
            assert_eq!(MetaState::decode(&image[..cut]), None);
        }
        assert_eq!(decode_command(&[]), None);
        assert_eq!(decode_command(&[99]), None);
        // A delete in the earlier format (name only, no incarnation) is refused, not guessed.
        let mut by_name = vec![2];
        put_str(&mut by_name, "x");
        assert_eq!(decode_command(&by_name), None);
    }

    #[test]
    fn an_update_changes_only_what_it_names_and_survives_the_image() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("t", 2)).unwrap();
        let before = state.topic("t").unwrap().clone();
        let bytes = Some(Some(MIN_RETENTION_BYTES));
        let Ok(Applied::Updated(after)) = state.apply(update("t", before.id.0, None, bytes)) else {
            panic!("the update applies");
        };
        assert_eq!(after.retention_bytes, Some(MIN_RETENTION_BYTES));
        assert_eq!(after.retention_ms, None, "not named: kept (the default stays in force)");
        assert_eq!(
            (after.id, after.partitions, after.created_ms),
            (before.id, 2, before.created_ms)
        );
        assert_eq!(state.topic("t"), Some(&after));
        let image = state.encode();
        assert_eq!(image[0], IMAGE_V3, "a size limit needs the v3 layout");
        assert_eq!(MetaState::decode(&image).as_ref(), Some(&state));
        let Ok(Applied::Updated(again)) =
            state.apply(update("t", before.id.0, Some(0), Some(None)))
        else {
            panic!("the second update applies");
        };
        assert_eq!((again.retention_ms, again.retention_bytes), (Some(0), None));
        assert_eq!(again.retention_ms_in_force(), 0);
        assert_eq!(state.encode()[0], IMAGE_V2, "without a size limit the old layout is written");
    }

    fn create_queued(name: &str, queue: QueueSettings) -> MetaCommand {
        MetaCommand::CreateTopic {
            name: name.into(),
            partitions: Some(1),
            retention_ms: None,
            retention_bytes: None,
            queue,
            now_ms: 3,
            seen_next_id: u64::MAX,
        }
    }

    /// Queue settings travel in their own create layout and image layout (the earlier ones
    /// stay what is written without them), survive the image, and are checked at apply: a
    /// dead-letter topic must exist and be another topic.
    #[test]
    fn queue_settings_travel_in_their_own_layouts_and_are_checked_at_apply() {
        use crate::api::DeadLetter;
        let dead = |topic: &str| QueueSettings {
            visibility_timeout_ms: Some(2_000),
            dead_letter: Some(DeadLetter { max_deliveries: 3, topic: topic.into() }),
        };
        let command = create_queued("jobs", dead("dlq"));
        let bytes = encode_command(&command);
        assert_eq!(bytes[0], CMD_CREATE_QUEUE);
        assert_eq!(decode_command(&bytes), Some(command.clone()));
        for cut in 0..bytes.len() {
            assert_eq!(decode_command(&bytes[..cut]), None, "cut at {cut}");
        }
        let plain = create_queued("jobs", QueueSettings::default());
        assert_ne!(encode_command(&plain)[0], CMD_CREATE_QUEUE, "the default: old tag");
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        let before = state.clone();
        for refused in [
            command.clone(),
            create_queued("dlq", dead("dlq")),
            create_queued("jobs", QueueSettings { visibility_timeout_ms: Some(1), ..dead("x") }),
        ] {
            let result = state.apply(refused.clone());
            assert!(matches!(result, Err(ClientError::BadRequest(_))), "{refused:?}: {result:?}");
            assert_eq!(state, before);
        }
        state.apply(create_queued("dlq", QueueSettings::default())).unwrap();
        assert_eq!(state.encode()[0], IMAGE_V2, "no queue settings yet: the old layout");
        let Ok(Applied::Created(jobs)) = state.apply(command) else { panic!("created") };
        assert_eq!(jobs.queue, dead("dlq"));
        let image = state.encode();
        assert_eq!(image[0], IMAGE_V4);
        let decoded = MetaState::decode(&image).expect("decodes");
        assert_eq!(decoded.topic("jobs").map(|t| &t.queue), Some(&dead("dlq")));
        assert_eq!(decoded, state);
        for cut in 0..image.len() {
            assert_eq!(MetaState::decode(&image[..cut]), None);
        }
    }

    /// Like C4 for deletes: an update that reaches the log late (after the name was deleted and
    /// created again) names the earlier incarnation and must not touch the later one.
    #[test]
    fn a_late_update_of_an_earlier_incarnation_changes_nothing() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("t", 1)).unwrap();
        let first = state.topic("t").unwrap().id;
        let late = update("t", first.0, Some(5_000), None);
        state.apply(MetaCommand::DeleteTopic { name: "t".into(), id: first }).unwrap();
        let gone = state.clone().apply(late.clone());
        assert!(matches!(gone, Err(ClientError::NotFound(_))), "{gone:?}");
        state.apply(create("t", 1)).unwrap();
        let before = state.clone();
        let refused = state.apply(late);
        assert!(matches!(&refused, Err(ClientError::NotFound(m)) if m.contains("now holds")));
        assert_eq!(state, before, "the later incarnation is untouched");
    }

    /// Apply time checks an update again (a faulty peer could propose anything): bad values and
    /// an empty change are refused and change nothing.
    #[test]
    fn an_update_with_bad_values_is_refused_at_apply() {
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("t", 1)).unwrap();
        let id = state.topic("t").unwrap().id.0;
        let before = state.clone();
        for bad in [
            update("t", id, None, None),
            update("t", id, Some(999), None),
            update("t", id, Some(MAX_RETENTION_MS + 1), None),
            update("t", id, None, Some(Some(MIN_RETENTION_BYTES - 1))),
        ] {
            let refused = state.apply(bad.clone());
            assert!(matches!(refused, Err(ClientError::BadRequest(_))), "{bad:?}: {refused:?}");
            assert_eq!(state, before);
        }
    }

    /// A snapshot image written by the build before `retention_bytes` (layout v2, spelled out
    /// byte by byte here rather than by today's encoder) still decodes, and re-encodes to the
    /// same bytes; a create of that build's Raft log (tag 1) decodes and applies as it did.
    #[test]
    fn an_image_and_a_create_of_the_earlier_layout_still_decode() {
        let mut old = vec![2u8];
        put_u64(&mut old, 2); // next topic id
        put_u64(&mut old, 3); // cursor
        put_u32(&mut old, 1); // one topic
        put_str(&mut old, "orders");
        put_u64(&mut old, 1); // id
        put_u32(&mut old, 3); // partitions
        put_u64(&mut old, u64::MAX); // retention: none given
        put_u64(&mut old, 99); // created
        put_u32(&mut old, 1); // one owner
        put_u32(&mut old, 1);
        put_u32(&mut old, 1); // one member
        put_u32(&mut old, 1);
        put_str(&mut old, "127.0.0.1:7941");
        put_str(&mut old, "127.0.0.1:8941");
        old.push(1);
        put_u64(&mut old, 5);
        put_u64(&mut old, 4);
        put_u64(&mut old, 0); // tombstone floor
        put_u32(&mut old, 0); // no tombstones
        let mut state = MetaState::decode(&old).expect("an earlier image decodes");
        assert_eq!(state.encode(), old, "and is canonical");
        let topic = state.topic("orders").unwrap();
        assert_eq!((topic.retention_ms, topic.retention_bytes), (None, None));
        assert_eq!(topic.retention_ms_in_force(), crate::constants::DEFAULT_RETENTION_MS);
        let mut v3 = old.clone();
        v3[0] = IMAGE_V3;
        assert_eq!(MetaState::decode(&v3), None, "v3 is only written with a size limit");

        let mut create = vec![1u8];
        put_str(&mut create, "audit");
        put_u64(&mut create, 2); // partitions
        put_u64(&mut create, 5); // retention_ms 5: accepted by that build, so it replays
        put_u64(&mut create, 100); // now
        put_u64(&mut create, 2); // seen next id
        let command = decode_command(&create).expect("an earlier create decodes");
        assert_eq!(encode_command(&command), create, "and is canonical");
        assert!(
            matches!(state.apply(command), Ok(Applied::Created(t)) if t.retention_ms == Some(5))
        );
        // The new tags refuse a second spelling of "none".
        let mut with_none = create.clone();
        with_none[0] = 6;
        put_u64(&mut with_none, u64::MAX);
        assert_eq!(decode_command(&with_none), None);
    }

    #[test]
    fn users_travel_in_commands_and_in_the_v5_image() {
        use crate::access::{Action, Grant, PasswordHash, TopicPattern};
        use crate::meta::users::{UserChange, UserId};
        let hash = |h: &str| PasswordHash::new(h.to_string()).expect("valid");
        let grant =
            Grant { action: Action::Produce, topics: TopicPattern::parse("orders.*").unwrap() };
        let mut state = MetaState::new();
        state.apply(heartbeat(1)).unwrap();
        state.apply(create("t", 1)).unwrap();
        assert_ne!(state.encode()[0], IMAGE_V5, "no user ever: the earlier layout");
        let commands = [
            MetaCommand::User(UserCommand::Create {
                name: "alice".into(),
                hash: hash("$argon2id$a"),
                grants: vec![grant.clone()],
                now_ms: 3,
                seen_next_id: 1,
            }),
            MetaCommand::User(UserCommand::Change {
                name: "alice".into(),
                id: UserId(1),
                change: UserChange::Grants(vec![]),
                now_ms: 4,
            }),
            MetaCommand::User(UserCommand::Change {
                name: "alice".into(),
                id: UserId(1),
                change: UserChange::Password(hash("$argon2id$b")),
                now_ms: 5,
            }),
            MetaCommand::User(UserCommand::Create {
                name: "bob".into(),
                hash: hash("$argon2id$c"),
                grants: vec![grant],
                now_ms: 6,
                seen_next_id: 2,
            }),
            MetaCommand::User(UserCommand::Delete { name: "bob".into(), id: UserId(2) }),
        ];
        for command in commands {
            let bytes = encode_command(&command);
            assert_eq!(decode_command(&bytes), Some(command.clone()));
            for cut in 0..bytes.len() {
                assert_eq!(decode_command(&bytes[..cut]), None, "{command:?} cut at {cut}");
            }
            assert!(state.apply(command).is_ok());
        }
        let (alice, alice_hash) = state.users().get("alice").expect("alice is there");
        assert_eq!((alice.grants.len(), alice_hash.expose()), (0, "$argon2id$b"));
        assert!(state.users().get("bob").is_none());
        let image = state.encode();
        assert_eq!(image[0], IMAGE_V5);
        assert_eq!(MetaState::decode(&image), Some(state.clone()));
        for cut in 0..image.len() {
            assert_eq!(MetaState::decode(&image[..cut]), None);
        }
        // bob's late create (its proposer looked before the delete) stays refused after a
        // snapshot too: the tombstones travel in the image.
        let mut restored = MetaState::decode(&image).unwrap();
        let late = MetaCommand::User(UserCommand::Create {
            name: "bob".into(),
            hash: hash("$argon2id$d"),
            grants: vec![],
            now_ms: 7,
            seen_next_id: 2,
        });
        assert!(matches!(restored.apply(late), Err(ClientError::Unavailable(_))));
    }
}
