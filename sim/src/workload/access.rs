//! The access client (docs/design.md §8). As a trusted caller it administers a few users
//! through the metastore: creates them with random grants, replaces their grants and passwords,
//! deletes them and creates them again (new incarnations). In between it asks as one of them, a
//! current incarnation or a stale one, for things whose only effect is the grant check's
//! verdict: producing to, deleting or looking up topics that never exist (404 when the check
//! lets it through, 403 when not), listing topics (filtered by the grants), listing users. The
//! checker judges every answer against the users' history (`checker/access.rs`); nothing it
//! does touches what the other clients produce and read.
//!
//! Over HTTP (tier 2, `over_http`) credentials name a user, not an incarnation, so each create
//! gets a password of its own and a marker grant saying which create it was: a stale
//! incarnation is asked for with its old credentials (the node must not take them for the
//! current incarnation's), and the checker finds the incarnation a create made by its marker.
//! The trusted caller is then the bootstrap admin, who never sets a password: a password
//! change is the user's own, to the same password (a new salt, so a new hash every node's
//! directory and credential cache must follow), which keeps each incarnation's password the
//! one its create gave it.

use std::collections::BTreeMap;

use bytes::Bytes;
use narad_core::access::{Action, Grant, PasswordHash, Principal, TopicPattern, UserId};
use narad_core::constants::TOPIC_PAGE_DEFAULT;
use narad_core::{ClientError, ClientOp, ClientReply, ProduceMessage};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::Who;
use crate::checker::{AccessAsk, AccessNeed, AsUser};

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
    pub who: Who,
    /// For a request as a user: what the checker judges it by.
    pub ask: Option<AccessAsk>,
    /// Over HTTP, a create: its number (its password and marker grant).
    pub create: Option<u64>,
}

/// The access client's state.
pub(super) struct AccessClient {
    rng: ChaCha8Rng,
    ops_left: u32,
    /// Every incarnation of each name it was told of, oldest first: its id, or over HTTP the
    /// number of the create that made it (or may have: an ambiguous answer).
    known: BTreeMap<String, Vec<u64>>,
    /// Over HTTP: the creates numbered so far.
    http_creates: Option<u64>,
}

impl AccessClient {
    pub fn new(rng: ChaCha8Rng, ops: u32) -> AccessClient {
        AccessClient { rng, ops_left: ops, known: BTreeMap::new(), http_creates: None }
    }

    /// Asks over HTTP (tier 2): with credentials, as the bootstrap admin or a user.
    pub fn over_http(&mut self) {
        self.http_creates.get_or_insert(0);
    }

    /// The next request, or `None` once it has made them all.
    pub fn next(&mut self) -> Option<AccessRequest> {
        if self.ops_left == 0 {
            return None;
        }
        self.ops_left -= 1;
        if self.known.is_empty() || self.rng.random_bool(0.35) {
            Some(self.admin_request())
        } else {
            Some(self.probe())
        }
    }

    /// Learns the incarnations the answer to `request` names (or, over HTTP, may have made).
    pub fn answered(&mut self, request: &AccessRequest, reply: Option<&ClientReply>) {
        if let (Some(number), ClientOp::CreateUser { name, .. }) = (request.create, &request.op) {
            let refused = matches!(reply, Some(ClientReply::Error(e)) if is_clean_refusal(e));
            if !refused {
                self.known.entry(name.clone()).or_default().push(number);
            }
            return;
        }
        if self.http_creates.is_some() {
            return; // the API shows no incarnation ids
        }
        if let Some(ClientReply::UserCreated(user) | ClientReply::UserChanged(user)) = reply {
            let ids = self.known.entry(user.name.clone()).or_default();
            if !ids.contains(&user.id.0) {
                ids.push(user.id.0);
            }
        }
    }

    fn admin_request(&mut self) -> AccessRequest {
        let name = NAMES[self.rng.random_range(0..NAMES.len())].to_string();
        let trusted = |op| AccessRequest { op, who: Who::trusted(), ask: None, create: None };
        match self.rng.random_range(0..10u8) {
            0..=3 => self.create(name),
            4..=6 => trusted(ClientOp::SetGrants { name, grants: self.grants() }),
            7 if self.http_creates.is_none() => {
                trusted(ClientOp::SetPassword { name, hash: hash("h2") })
            }
            7 => self.own_password(&name).unwrap_or_else(|| trusted(ClientOp::GetUser { name })),
            _ => trusted(ClientOp::DeleteUser { name }),
        }
    }

    fn create(&mut self, name: String) -> AccessRequest {
        let mut grants = self.grants();
        let Some(creates) = self.http_creates.as_mut() else {
            let op = ClientOp::CreateUser { name, hash: hash("h1"), grants };
            return AccessRequest { op, who: Who::trusted(), ask: None, create: None };
        };
        *creates += 1;
        let number = *creates;
        grants.push(marker(number));
        // Over HTTP the op carries the password where the core's carries its hash: the v1
        // request sends it, and the node hashes it.
        let op = ClientOp::CreateUser {
            name: name.clone(),
            hash: hash(&password(&name, number)),
            grants,
        };
        AccessRequest { op, who: Who::trusted(), ask: None, create: Some(number) }
    }

    /// Over HTTP: the latest known incarnation of `name` sets its own password again.
    fn own_password(&self, name: &str) -> Option<AccessRequest> {
        let number = *self.known.get(name)?.last()?;
        let (who, as_user) = self.asker(name, number);
        let op =
            ClientOp::SetPassword { name: name.to_string(), hash: hash(&password(name, number)) };
        let ask = AccessAsk { name: name.to_string(), who: as_user, need: AccessNeed::Own };
        Some(AccessRequest { op, who, ask: Some(ask), create: None })
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

    /// Who asks as known incarnation `known` of `name`, and as whom the checker judges it.
    fn asker(&self, name: &str, known: u64) -> (Who, AsUser) {
        if self.http_creates.is_some() {
            let who = Who::Basic { name: name.to_string(), password: password(name, known) };
            return (who, AsUser::CreatedWith(marker(known)));
        }
        let id = UserId(known);
        (Who::Principal(Principal::User { name: name.to_string(), id }), AsUser::Id(id))
    }

    /// A request as a known incarnation (the latest mostly, an older one sometimes).
    fn probe(&mut self) -> AccessRequest {
        let names: Vec<&String> = self.known.keys().collect();
        let name = names[self.rng.random_range(0..names.len())].clone();
        let ids = &self.known[&name];
        // Over HTTP older credentials half the time: a node must not take them for the
        // current incarnation's (its credential cache, say).
        let latest = if self.http_creates.is_some() { 0.5 } else { 0.8 };
        let known = if self.rng.random_bool(latest) {
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
            3 => (
                ClientOp::GetTopic { name: topic.clone(), partition: None },
                AccessNeed::AnyOn(topic),
            ),
            4 => (self.page(&topic), AccessNeed::List),
            _ => (ClientOp::ListUsers, AccessNeed::ClusterAdmin),
        };
        let (who, as_user) = self.asker(&name, known);
        let ask = AccessAsk { name, who: as_user, need };
        AccessRequest { op, who, ask: Some(ask), create: None }
    }
}

impl AccessClient {
    /// A page of the topic list: from the start or after `name` (a token need not name a
    /// topic), one, two or the default number of topics.
    fn page(&mut self, name: &str) -> ClientOp {
        let after = self.rng.random_bool(0.5).then(|| name.to_string());
        let limit = [1, 2, TOPIC_PAGE_DEFAULT][self.rng.random_range(0..3)];
        ClientOp::ListTopics { after, limit }
    }
}

fn hash(text: &str) -> PasswordHash {
    PasswordHash::new(text.to_string()).expect("a non-empty hash")
}

/// The password of create `number` of `name` (over HTTP).
fn password(name: &str, number: u64) -> String {
    format!("secret-{name}-{number}")
}

/// The grant that marks create `number` (over HTTP): on a topic no one creates or asks for.
fn marker(number: u64) -> Grant {
    let topics = TopicPattern::parse(&format!("incarnation.{number}")).expect("a valid name");
    Grant { action: Action::Consume, topics }
}

/// An answer that says the create did not happen (a 4xx: refused before anything changed).
fn is_clean_refusal(error: &ClientError) -> bool {
    (400..500).contains(&error.http_status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn client(http: bool) -> AccessClient {
        let mut client = AccessClient::new(ChaCha8Rng::seed_from_u64(7), 400);
        if http {
            client.over_http();
        }
        client
    }

    #[test]
    fn over_http_each_create_has_its_own_password_and_marker_and_probes_use_them() {
        let mut client = client(true);
        let mut creates = 0;
        let mut probes = 0;
        while let Some(request) = client.next() {
            if let ClientOp::CreateUser { name, hash, grants } = &request.op {
                let number = request.create.expect("numbered");
                assert_eq!(hash.expose(), password(name, number));
                assert!(grants.contains(&marker(number)));
                creates += 1;
            }
            if let (Who::Basic { name, password: sent }, Some(ask)) = (&request.who, &request.ask) {
                let AsUser::CreatedWith(marker_sent) = &ask.who else { panic!("{ask:?}") };
                let number = client.known[name]
                    .iter()
                    .find(|&&n| marker(n) == *marker_sent)
                    .expect("a known create");
                assert_eq!(*sent, password(name, *number));
                probes += 1;
            }
            client.answered(&request, None); // ambiguous: the create may have happened
        }
        assert!(creates > 10 && probes > 100, "{creates} creates, {probes} probes");
    }

    #[test]
    fn over_http_a_refused_create_makes_no_incarnation() {
        let mut client = client(true);
        let refused = ClientReply::Error(ClientError::Conflict("exists".into()));
        let mut creates = 0;
        while let Some(request) = client.next() {
            assert!(request.ask.is_none(), "only the admin asks while no user is known");
            creates += u32::from(request.create.is_some());
            client.answered(&request, Some(&refused));
        }
        assert!(creates > 100 && client.known.is_empty(), "{creates} creates");
    }

    #[test]
    fn the_first_tier_asks_as_principals_by_incarnation_id() {
        let mut client = client(false);
        let request = client.next().expect("a request");
        assert_eq!(request.who, Who::trusted());
        assert_eq!(request.create, None);
        client.known.insert("u0".into(), vec![4]);
        let (who, as_user) = client.asker("u0", 4);
        let principal = Principal::User { name: "u0".into(), id: UserId(4) };
        assert_eq!((who, as_user), (Who::Principal(principal), AsUser::Id(UserId(4))));
    }
}
