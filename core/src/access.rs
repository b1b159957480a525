//! Who may do what: the four actions a grant gives, the topic patterns a grant covers, and the
//! check a request passes before it runs (docs/design.md §8). Users and their grants live in the
//! metastore (`meta::users`); verifying a password is the runtime's (a memory-hard KDF has no
//! place in a deterministic state machine), so the core only carries the hash, opaque, and
//! never prints it.

use std::fmt;

use crate::constants::{MAX_GRANTS_PER_USER, MAX_USER_NAME_BYTES};

/// What a grant allows on the topics it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Produce (single and batch).
    Produce,
    /// Consume and read queues: receive, ack, nack, extend.
    Consume,
    /// Create topics whose name the pattern covers.
    Create,
    /// Everything on the covered topics (change and delete them too); with the pattern `*`,
    /// also users and the cluster.
    Admin,
}

impl Action {
    /// Every action, in encoding order.
    pub const ALL: [Action; 4] = [Action::Produce, Action::Consume, Action::Create, Action::Admin];

    /// The wire and JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Action::Produce => "produce",
            Action::Consume => "consume",
            Action::Create => "create",
            Action::Admin => "admin",
        }
    }

    /// Inverse of `name`.
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Option<Action> {
        Action::ALL.get(usize::from(code)).copied()
    }
}

/// The topics a grant covers: one name, every name starting with a prefix (`orders.*`), or all
/// (`*`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopicPattern {
    /// `*`.
    Any,
    /// `<prefix>*`: every name that starts with the prefix (not empty).
    Prefix(String),
    /// A topic name.
    Exact(String),
}

impl TopicPattern {
    /// Parses `orders`, `orders.*` (any trailing `*`) or `*`. A `*` anywhere else is refused, and
    /// so is a character no topic name may hold.
    pub fn parse(text: &str) -> Result<TopicPattern, String> {
        if text == "*" {
            return Ok(TopicPattern::Any);
        }
        let (body, prefix) = match text.strip_suffix('*') {
            Some(body) => (body, true),
            None => (text, false),
        };
        let charset_ok = body.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if body.is_empty() || body.len() > crate::constants::MAX_TOPIC_NAME_BYTES || !charset_ok {
            return Err(format!(
                "invalid topic pattern {text:?}: a topic name, a name prefix followed by `*` \
                 (e.g. `orders.*`), or `*`"
            ));
        }
        Ok(if prefix {
            TopicPattern::Prefix(body.to_string())
        } else {
            TopicPattern::Exact(body.to_string())
        })
    }

    /// Whether the pattern covers topic `name`.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            TopicPattern::Any => true,
            TopicPattern::Prefix(prefix) => name.starts_with(prefix.as_str()),
            TopicPattern::Exact(exact) => name == exact,
        }
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicPattern::Any => f.write_str("*"),
            TopicPattern::Prefix(prefix) => write!(f, "{prefix}*"),
            TopicPattern::Exact(name) => f.write_str(name),
        }
    }
}

/// One permission: `action` on the topics `topics` covers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    pub action: Action,
    pub topics: TopicPattern,
}

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs<'a> {
    /// `action` on topic `name` (an `admin` grant covering the name gives every action).
    Topic(Action, &'a str),
    /// Managing users or the cluster: `admin` on `*`.
    ClusterAdmin,
    /// Any grant covering topic `name`, whatever its action (reading a topic's details).
    AnyOn(&'a str),
    /// Only to be someone (listing topics: the answer holds only what the caller may see).
    Authenticated,
}

/// Whether `grants` give what `needs` asks.
pub fn allows(grants: &[Grant], needs: Needs<'_>) -> bool {
    match needs {
        Needs::Topic(action, name) => grants
            .iter()
            .any(|g| (g.action == action || g.action == Action::Admin) && g.topics.matches(name)),
        Needs::ClusterAdmin => {
            grants.iter().any(|g| g.action == Action::Admin && g.topics == TopicPattern::Any)
        }
        Needs::AnyOn(name) => sees(grants, name),
        Needs::Authenticated => true,
    }
}

/// Whether `grants` give any action at all on topic `name` (what listing shows).
pub fn sees(grants: &[Grant], name: &str) -> bool {
    grants.iter().any(|g| g.topics.matches(name))
}

/// Checks a user name: `[A-Za-z0-9._@-]{1,64}`.
pub fn validate_user_name(name: &str) -> Result<(), String> {
    let charset_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b));
    if name.is_empty() || name.len() > MAX_USER_NAME_BYTES || !charset_ok {
        return Err(format!(
            "invalid user name {name:?}: use 1-{MAX_USER_NAME_BYTES} characters from \
             [A-Za-z0-9._@-]"
        ));
    }
    Ok(())
}

/// Checks a user's grants: at most `MAX_GRANTS_PER_USER`, none twice.
pub fn validate_grants(grants: &[Grant]) -> Result<(), String> {
    if grants.len() > MAX_GRANTS_PER_USER {
        return Err(format!("a user holds at most {MAX_GRANTS_PER_USER} grants"));
    }
    let mut sorted: Vec<&Grant> = grants.iter().collect();
    sorted.sort();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err("a grant is listed twice".to_string());
    }
    Ok(())
}

/// A password hash in the KDF's own string form (PHC). Opaque to the core; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordHash(String);

impl PasswordHash {
    /// The longest hash string accepted (a PHC string of argon2id is about 100 bytes).
    pub const MAX_BYTES: usize = 512;

    /// Wraps a hash string; refuses an empty or oversized one.
    pub fn new(hash: String) -> Result<PasswordHash, String> {
        if hash.is_empty() || hash.len() > PasswordHash::MAX_BYTES {
            return Err("invalid password hash".to_string());
        }
        Ok(PasswordHash(hash))
    }

    /// The hash string, for the runtime's verifier and the metastore's encoding only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordHash(<redacted>)")
    }
}

/// Incarnation id of a user: a user deleted and created again under the same name gets a new
/// one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserId(pub u64);

/// A user as answers show it: everything but the hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub id: UserId,
    pub grants: Vec<Grant>,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// Who a request comes from, as the runtime established it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// Access control is off for this request: a node with no users on a loopback address, a
    /// node started with `--insecure-no-auth`, or the node itself. Everything is allowed.
    Trusted,
    /// A user whose password the runtime verified against incarnation `id` of `name`. The
    /// core allows what that incarnation's grants allow, as its replica knows them now.
    User { name: String, id: UserId },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(action: Action, topics: &str) -> Grant {
        Grant { action, topics: TopicPattern::parse(topics).expect("valid pattern") }
    }

    #[test]
    fn patterns_parse_match_and_print_back() {
        for (text, yes, no) in [
            ("*", "anything", None),
            ("orders.*", "orders.eu", Some("payments")),
            ("orders", "orders", Some("orders.eu")),
            ("ord*", "orders", Some("payments")),
        ] {
            let pattern = TopicPattern::parse(text).expect(text);
            assert!(pattern.matches(yes), "{text} covers {yes}");
            if let Some(no) = no {
                assert!(!pattern.matches(no), "{text} does not cover {no}");
            }
            assert_eq!(pattern.to_string(), text);
        }
        for bad in ["", "**", "or*ders", "*.eu", "a/b*", "sp ace", &"x".repeat(201)] {
            assert!(TopicPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_produce_grant_on_a_prefix_allows_only_that() {
        let grants = [grant(Action::Produce, "orders.*")];
        assert!(allows(&grants, Needs::Topic(Action::Produce, "orders.eu")));
        for (action, topic) in [
            (Action::Produce, "payments"),
            (Action::Consume, "orders.eu"),
            (Action::Create, "orders.eu"),
            (Action::Admin, "orders.eu"),
        ] {
            assert!(!allows(&grants, Needs::Topic(action, topic)), "{action:?} on {topic}");
        }
        assert!(!allows(&grants, Needs::ClusterAdmin));
        assert!(sees(&grants, "orders.eu") && !sees(&grants, "payments"));
    }

    #[test]
    fn admin_covers_every_action_on_its_topics_and_the_cluster_only_on_star() {
        let scoped = [grant(Action::Admin, "orders.*")];
        for action in Action::ALL {
            assert!(allows(&scoped, Needs::Topic(action, "orders.eu")));
            assert!(!allows(&scoped, Needs::Topic(action, "payments")));
        }
        assert!(!allows(&scoped, Needs::ClusterAdmin));
        assert!(allows(&[grant(Action::Admin, "*")], Needs::ClusterAdmin));
        assert!(!allows(&[grant(Action::Produce, "*")], Needs::ClusterAdmin));
    }

    #[test]
    fn names_grants_and_hashes_are_checked() {
        assert!(validate_user_name("alice.ops@eu-1").is_ok());
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65)] {
            assert!(validate_user_name(bad).is_err(), "{bad:?}");
        }
        let twice = [grant(Action::Produce, "a"), grant(Action::Produce, "a")];
        assert!(validate_grants(&twice).is_err());
        let many: Vec<Grant> =
            (0..=MAX_GRANTS_PER_USER).map(|i| grant(Action::Produce, &format!("t{i}"))).collect();
        assert!(validate_grants(&many).is_err());
        assert!(validate_grants(&many[1..]).is_ok());
        assert!(PasswordHash::new(String::new()).is_err());
        let hash = PasswordHash::new("$argon2id$v=19$secret".into()).expect("valid");
        assert!(!format!("{hash:?}").contains("secret"), "a hash never prints");
    }

    #[test]
    fn action_codes_round_trip() {
        for action in Action::ALL {
            assert_eq!(Action::from_code(action.code()), Some(action));
            assert_eq!(Action::parse(action.name()), Some(action));
        }
        assert_eq!(Action::from_code(4), None);
    }
}
