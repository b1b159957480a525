//! The access client (docs/design.md §8). As a trusted caller it administers a few users
//! through the metastore: creates them with random grants, replaces their grants and passwords,
//! deletes them and creates them again (new incarnations). In between it asks as one of them, a
//! current incarnation or a stale one, for things whose only effect is the grant check's
//! verdict: producing to, deleting or looking up topics that never exist (404 when the check
//! lets it through, 403 when not), listing topics (filtered by the grants), listing users. The
//! checker judges every answer against the users' history (`checker/access.rs`); nothing it
//! does touches what the other clients produce and read.

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::access::{Action, Grant, PasswordHash, Principal, TopicPattern, UserId};
use narad_core::{ClientOp, ClientReply, ProduceMessage};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::checker::{AccessAsk, AccessNeed};

/// The users it administers.
const NAMES: [&str; 3] = ["u0", "u1", "u2"];
/// Patterns its grants use: the workload's topics (`t1`, `t2`, ...) and names no topic has.
const PATTERNS: [&str; 7] = ["*", "t*", "t1", "t2", "acl.*", "acl.a", "acl"];
/// Topics its probes name: never created by anyone.
const ABSENT_TOPICS: [&str; 4] = ["acl.a", "acl.b", "acl", "zz"];

/// What the access client asks next.
#[derive(Clone, Debug)]
pub(super) struct AccessRequest {
    pub op: ClientOp,
    pub who: Principal,
    /// For a request as a user: what the checker judges it by.
    pub ask: Option<AccessAsk>,
}

/// The access client's state.
pub(super) struct AccessClient {
    rng: ChaCha8Rng,
    ops_left: u32,
    /// Every incarnation of each name it was told of, oldest first.
    known: BTreeMap<String, Vec<UserId>>,
}

impl AccessClient {
    pub fn new(rng: ChaCha8Rng, ops: u32) -> AccessClient {
        AccessClient { rng, ops_left: ops, known: BTreeMap::new() }
    }

    /// The next request, or `None` once it has made them all.
    pub fn next(&mut self) -> Option<AccessRequest> {
        if self.ops_left == 0 {
            return None;
        }
        self.ops_left -= 1;
        if self.known.is_empty() || self.rng.random_bool(0.35) {
            Some(AccessRequest { op: self.admin_op(), who: Principal::Trusted, ask: None })
        } else {
            Some(self.probe())
        }
    }

    /// Learns the incarnations the answers name.
    pub fn answered(&mut self, reply: Option<&ClientReply>) {
        if let Some(ClientReply::UserCreated(user) | ClientReply::UserChanged(user)) = reply {
            let ids = self.known.entry(user.name.clone()).or_default();
            if !ids.contains(&user.id) {
                ids.push(user.id);
            }
        }
    }

    fn admin_op(&mut self) -> ClientOp {
        let name = NAMES[self.rng.random_range(0..NAMES.len())].to_string();
        match self.rng.random_range(0..10u8) {
            0..=3 => ClientOp::CreateUser { name, hash: hash("h1"), grants: self.grants() },
            4..=6 => ClientOp::SetGrants { name, grants: self.grants() },
            7 => ClientOp::SetPassword { name, hash: hash("h2") },
            _ => ClientOp::DeleteUser { name },
        }
    }

    fn grants(&mut self) -> Vec<Grant> {
        let mut grants: Vec<Grant> = Vec::new();
        for _ in 0..self.rng.random_range(0..=3u8) {
            let action = Action::ALL[self.rng.random_range(0..Action::ALL.len())];
            let pattern = PATTERNS[self.rng.random_range(0..PATTERNS.len())];
            let grant = Grant { action, topics: TopicPattern::parse(pattern).expect("valid") };
            if !grants.contains(&grant) {
                grants.push(grant);
            }
        }
        grants
    }

    /// A request as a known incarnation (the latest mostly, an older one sometimes).
    fn probe(&mut self) -> AccessRequest {
        let names: Vec<&String> = self.known.keys().collect();
        let name = names[self.rng.random_range(0..names.len())].clone();
        let ids = &self.known[&name];
        let id = if self.rng.random_bool(0.8) {
            *ids.last().expect("known names have an incarnation")
        } else {
            ids[self.rng.random_range(0..ids.len())]
        };
        let topic = ABSENT_TOPICS[self.rng.random_range(0..ABSENT_TOPICS.len())].to_string();
        let (op, need) = match self.rng.random_range(0..6u8) {
            0 | 1 => {
                let message =
                    ProduceMessage { key: None, partition: None, payload: Bytes::from("a") };
                let op = ClientOp::Produce {
                    topic: topic.clone(),
                    messages: vec![message],
                    batch: false,
                };
                (op, AccessNeed::Topic(Action::Produce, topic))
            }
            2 => (
                ClientOp::DeleteTopic { name: topic.clone() },
                AccessNeed::Topic(Action::Admin, topic),
            ),
            3 => (ClientOp::GetTopic { name: topic.clone() }, AccessNeed::AnyOn(topic)),
            4 => (ClientOp::ListTopics, AccessNeed::List),
            _ => (ClientOp::ListUsers, AccessNeed::ClusterAdmin),
        };
        let ask = AccessAsk { name: name.clone(), id, need };
        AccessRequest { op, who: Principal::User { name, id }, ask: Some(ask) }
    }
}

fn hash(text: &str) -> PasswordHash {
    PasswordHash::new(text.to_string()).expect("a non-empty hash")
}
