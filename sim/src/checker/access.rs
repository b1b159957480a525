//! Grant checks against the users' history (docs/design.md §8). Every node reports each user
//! change its metastore replica applies with the entry's Raft log index (`UserApplied`), and the
//! index its users stand at after a recovery or an installed snapshot (`UsersReplaced`);
//! together the first reports of each index are the users' history, and each node's users are
//! that history up to the index it last reported. Two reports of one index must agree.
//!
//! The access client asks as some user incarnation for things whose only effect is the grant
//! check's verdict. Its request reached node `n` when `n`'s users stood at index `lo` and was
//! answered when they stood at `hi` (the furthest `n` ever reported by then: an answer may
//! arrive after its process died and another started): the node decided with one of the
//! versions of the users between the two. Checked once the run is over:
//!
//! - an allowed answer (2xx, or a 404 for a topic that never exists, which the check let
//!   through) needs a version in `lo..=hi` where the incarnation exists and its grants allow
//!   the request (`access-beyond-grants`: the node gave more than its state said);
//! - a 403 needs a version where the incarnation exists and its grants do not allow it, up to
//!   the furthest index any node stood at when it was answered (a partition's owner checks a
//!   forwarded read again, and may be ahead of the entry node);
//! - a 401 needs a version in `lo..=hi` where the incarnation does not exist (or, when several
//!   incarnations may be the asker's, two of them in turn: the node may have resolved the
//!   name to one and checked the grants of the next);
//! - a listing of topics holds only names some version's grants cover.
//!
//! Anything else (5xx, 503 retry, 429, timeouts) is ambiguous and allowed either way.
//!
//! Who asks: the first tier hands the node a principal, one incarnation (`AsUser::Id`). Over
//! HTTP (tier 2) credentials name a user, not an incarnation: the node resolves the name with
//! its copy of the users and checks the password against that incarnation's hash. So tier 2's
//! access client gives every create a password of its own and a marker grant on a topic no
//! one uses (`AsUser::CreatedWith`): its credentials match only the incarnation that create
//! made, which the checker finds by the marker in the users' history. The bootstrap admin,
//! created once and never changed, asks as `AsUser::Any`.

use std::collections::BTreeMap;
use std::ops::Bound;

use narad_core::access::{Action, Grant, UserId, UserInfo};
use narad_core::{ClientReply, RequestId, UserApplied};

use super::{Checker, inv};

/// What an access probe needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AccessNeed {
    Topic(Action, String),
    AnyOn(String),
    ClusterAdmin,
    /// A topic listing: any user may list, the answer is filtered.
    List,
    /// Only to be this user (its own password).
    Own,
}

/// A request the access client made as a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessAsk {
    pub name: String,
    pub who: AsUser,
    pub need: AccessNeed,
}

/// Which incarnations of the asking user a request is made as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AsUser {
    /// This one (the first tier names it in the principal).
    Id(UserId),
    /// Whichever the node holds (tier 2's bootstrap admin: one incarnation, never changed).
    Any,
    /// The one whose create listed this marker grant (tier 2's users: the credentials of a
    /// create match only the incarnation it made).
    CreatedWith(Grant),
}

#[derive(Clone, Debug)]
struct Asked {
    ask: AccessAsk,
    node: u32,
    lo: u64,
}

#[derive(Clone, Debug)]
enum Verdict {
    Allowed,
    Forbidden,
    Unknown,
    Listed(Vec<String>),
}

#[derive(Clone, Debug)]
struct Judged {
    asked: Asked,
    hi: u64,
    hi_any: u64,
    verdict: Verdict,
}

/// The users' history and the probes to judge.
#[derive(Default)]
pub(super) struct AccessHistory {
    changes: BTreeMap<u64, UserApplied>,
    /// Where each node's users stand (its current process's reports; 0 until a new process
    /// reports), and the furthest they ever stood (over every process).
    node_index: BTreeMap<u32, u64>,
    node_high: BTreeMap<u32, u64>,
    asked: BTreeMap<RequestId, Asked>,
    answered: Vec<Judged>,
}

impl Checker {
    /// Node `node` applied `change` at log index `index`.
    pub(super) fn user_applied(&mut self, node: u32, index: u64, change: &UserApplied) {
        self.access.stands_at(node, index);
        let history = &mut self.access;
        match history.changes.get(&index) {
            None => {
                history.changes.insert(index, change.clone());
            }
            Some(first) if first == change => {}
            Some(first) => {
                let detail = format!("n{node}: index {index} applied {change:?}, first {first:?}");
                self.violation(inv::USERS_DIVERGED, detail);
            }
        }
    }

    /// Node `node`'s users now stand at `index`.
    pub(super) fn users_replaced(&mut self, node: u32, index: u64) {
        self.access.stands_at(node, index);
    }

    /// Node `node`'s process starts again: until it reports where its users stand (its first
    /// `UsersReplaced`), they may stand anywhere from the start (tier 2's HTTP server may
    /// take a request before the driver reported its recovery). An answer the previous process
    /// sent may still arrive: answers are judged up to the furthest the node ever stood.
    pub fn users_unknown(&mut self, node: u32) {
        self.access.node_index.insert(node, 0);
    }

    /// Whether some node reported user `name` (any incarnation, at any time).
    pub fn user_reported(&self, name: &str) -> bool {
        let named = |change: &UserApplied| matches!(change, UserApplied::Put(u) if u.name == name);
        self.access.changes.values().any(named)
    }

    /// The access client sent `request` to node `node`.
    pub fn access_asked(&mut self, request: RequestId, node: u32, ask: AccessAsk) {
        let lo = self.access.node_index.get(&node).copied().unwrap_or(0);
        self.access.asked.insert(request, Asked { ask, node, lo });
    }

    /// The answer to an access probe (`None`: none came).
    pub fn access_answered(&mut self, request: RequestId, reply: Option<&ClientReply>) {
        let Some(asked) = self.access.asked.remove(&request) else { return };
        let verdict = match reply {
            Some(ClientReply::Topics { topics, .. }) => {
                Verdict::Listed(topics.iter().map(|t| t.name.clone()).collect())
            }
            Some(ClientReply::Error(error)) => match error.http_status() {
                404 => Verdict::Allowed,
                403 => Verdict::Forbidden,
                401 => Verdict::Unknown,
                _ => return,
            },
            Some(_) => Verdict::Allowed,
            None => return,
        };
        let hi = self.access.node_high.get(&asked.node).copied().unwrap_or(0);
        let hi_any = self.access.node_high.values().copied().max().unwrap_or(0).max(hi);
        self.access.answered.push(Judged { asked, hi, hi_any, verdict });
    }

    /// Judges every answered probe (once the run is over).
    pub(super) fn check_access(&mut self) {
        let answered = std::mem::take(&mut self.access.answered);
        for judged in &answered {
            if let Err(detail) = self.access.judge(judged) {
                self.violation(detail.0, detail.1);
            }
            match judged.asked.ask.who {
                AsUser::Any => self.counters.access_admin_judged += 1,
                _ => self.counters.access_probes_judged += 1,
            }
        }
    }
}

impl AccessHistory {
    fn stands_at(&mut self, node: u32, index: u64) {
        self.node_index.insert(node, index);
        let high = self.node_high.entry(node).or_default();
        *high = (*high).max(index);
    }

    /// The versions of user `name` from the state at `lo` through each change up to `hi`.
    fn versions(&self, name: &str, lo: u64, hi: u64) -> Vec<Option<UserInfo>> {
        let mut user: Option<UserInfo> = None;
        let apply = |user: &mut Option<UserInfo>, change: &UserApplied| match change {
            UserApplied::Put(info) if info.name == name => *user = Some(info.clone()),
            UserApplied::Removed { name: gone, .. } if gone == name => *user = None,
            _ => {}
        };
        for change in self.changes.range(..=lo).map(|(_, c)| c) {
            apply(&mut user, change);
        }
        let mut versions = vec![user.clone()];
        let later = (Bound::Excluded(lo), Bound::Included(hi.max(lo)));
        for change in self.changes.range(later).map(|(_, c)| c) {
            apply(&mut user, change);
            versions.push(user.clone());
        }
        versions
    }

    /// The incarnations of `name` whose reported versions list `marker` among their grants.
    fn created_with(&self, name: &str, marker: &Grant) -> Vec<UserId> {
        let mut ids: Vec<UserId> = Vec::new();
        for change in self.changes.values() {
            if let UserApplied::Put(user) = change
                && user.name == name
                && user.grants.contains(marker)
                && !ids.contains(&user.id)
            {
                ids.push(user.id);
            }
        }
        ids
    }

    fn judge(&self, judged: &Judged) -> Result<(), (&'static str, String)> {
        let Judged { asked, hi, hi_any, verdict } = judged;
        let ask = &asked.ask;
        let marked = match &ask.who {
            AsUser::CreatedWith(marker) => self.created_with(&ask.name, marker),
            AsUser::Id(_) | AsUser::Any => Vec::new(),
        };
        let is_asker = |u: &&UserInfo| match &ask.who {
            AsUser::Id(id) => u.id == *id,
            AsUser::Any => true,
            AsUser::CreatedWith(_) => marked.contains(&u.id),
        };
        let current = |v: &Option<UserInfo>| v.as_ref().filter(is_asker).cloned();
        let versions = self.versions(&ask.name, asked.lo, *hi);
        let held: Vec<UserInfo> = versions.iter().filter_map(current).collect();
        let allowed = |user: &UserInfo| model_allows(&user.grants, &ask.need);
        let found = match verdict {
            Verdict::Allowed => held.iter().any(allowed),
            // Also: the node resolved one incarnation and checked the grants of another.
            Verdict::Unknown => {
                versions.iter().any(|v| current(v).is_none())
                    || held.windows(2).any(|pair| pair[0].id != pair[1].id)
            }
            Verdict::Forbidden => self
                .versions(&ask.name, asked.lo, *hi_any)
                .iter()
                .filter_map(current)
                .any(|user| !allowed(&user)),
            Verdict::Listed(names) => {
                names.iter().all(|topic| {
                    held.iter().any(|user| user.grants.iter().any(|g| covers(g, topic)))
                }) && !held.is_empty()
            }
        };
        if found {
            return Ok(());
        }
        let invariant = match verdict {
            Verdict::Allowed | Verdict::Listed(_) => inv::ACCESS_GRANTED,
            Verdict::Forbidden | Verdict::Unknown => inv::ACCESS_REFUSED,
        };
        let detail = format!(
            "n{}: {verdict:?} for {} (as {:?}) needing {:?}, users at index {}..={} ({} \
             versions: {:?})",
            asked.node,
            ask.name,
            ask.who,
            ask.need,
            asked.lo,
            hi,
            versions.len(),
            versions
        );
        Err((invariant, detail))
    }
}

/// The checker's own reading of what grants allow (docs/design.md §8), written apart from the
/// core's so that a mistake there is not made here too.
fn model_allows(grants: &[Grant], need: &AccessNeed) -> bool {
    match need {
        AccessNeed::Topic(action, topic) => grants
            .iter()
            .any(|g| (g.action == *action || g.action == Action::Admin) && covers(g, topic)),
        AccessNeed::AnyOn(topic) => grants.iter().any(|g| covers(g, topic)),
        AccessNeed::ClusterAdmin => {
            grants.iter().any(|g| g.action == Action::Admin && g.topics.to_string() == "*")
        }
        AccessNeed::List | AccessNeed::Own => true,
    }
}

/// Whether grant `g`'s pattern, as written, covers `topic`: `*`, a prefix ending in `*`, or the
/// exact name.
fn covers(g: &Grant, topic: &str) -> bool {
    let pattern = g.topics.to_string();
    match pattern.strip_suffix('*') {
        Some(prefix) => topic.starts_with(prefix),
        None => topic == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_core::access::TopicPattern;
    use narad_core::{ClientError, NodeEvent};

    fn user(id: u64, grants: &[(Action, &str)]) -> UserInfo {
        let grants = grants
            .iter()
            .map(|(action, p)| Grant {
                action: *action,
                topics: TopicPattern::parse(p).expect("p"),
            })
            .collect();
        UserInfo { name: "u".into(), id: UserId(id), grants, created_ms: 0, updated_ms: 0 }
    }

    fn probe(checker: &mut Checker, request: u64, node: u32, need: AccessNeed, reply: ClientReply) {
        let ask = AccessAsk { name: "u".into(), who: AsUser::Id(UserId(1)), need };
        checker.access_asked(RequestId(request), node, ask);
        checker.access_answered(RequestId(request), Some(&reply));
    }

    fn produce_to(topic: &str) -> AccessNeed {
        AccessNeed::Topic(Action::Produce, topic.into())
    }

    #[test]
    fn answers_are_judged_against_the_versions_the_node_could_have_used() {
        let mut checker = Checker::new(true);
        let put = |u| NodeEvent::UserApplied { index: 5, change: UserApplied::Put(u) };
        checker.on_event(0, &put(user(1, &[(Action::Produce, "a*")])));
        let not_found = ClientReply::Error(ClientError::NotFound("no such topic".into()));
        let forbidden = ClientReply::Error(ClientError::Forbidden("no".into()));
        probe(&mut checker, 1, 0, produce_to("a.x"), not_found.clone());
        probe(&mut checker, 2, 0, produce_to("b"), forbidden.clone());
        checker.check_access();
        assert_eq!(checker.violations().1, 0, "{:?}", checker.violations().0);
        // The node let through what no version allowed; and refused what every version allowed.
        probe(&mut checker, 3, 0, produce_to("b"), not_found);
        probe(&mut checker, 4, 0, produce_to("a.y"), forbidden);
        checker.check_access();
        let (violations, count) = checker.violations();
        assert_eq!(count, 2);
        assert_eq!(violations[0].invariant, inv::ACCESS_GRANTED);
        assert_eq!(violations[1].invariant, inv::ACCESS_REFUSED);
    }

    #[test]
    fn a_revoke_applied_during_the_request_allows_either_answer_and_a_stale_incarnation_is_401() {
        let mut checker = Checker::new(true);
        let at = |index, u| NodeEvent::UserApplied { index, change: UserApplied::Put(u) };
        checker.on_event(0, &at(3, user(1, &[(Action::Produce, "*")])));
        let ask = AccessAsk { name: "u".into(), who: AsUser::Id(UserId(1)), need: produce_to("t") };
        checker.access_asked(RequestId(1), 0, ask.clone());
        checker.on_event(0, &at(4, user(1, &[])));
        checker.access_answered(RequestId(1), Some(&ClientReply::Produced { accepted: 1 }));
        let removed = UserApplied::Removed { name: "u".into(), id: UserId(1) };
        checker.on_event(0, &NodeEvent::UserApplied { index: 6, change: removed });
        checker.on_event(0, &at(7, user(2, &[(Action::Produce, "*")])));
        let unknown = ClientReply::Error(ClientError::Unauthenticated("gone".into()));
        checker.access_asked(RequestId(2), 0, ask.clone());
        checker.access_answered(RequestId(2), Some(&unknown));
        checker.access_asked(RequestId(3), 0, ask);
        checker.access_answered(RequestId(3), Some(&ClientReply::Produced { accepted: 1 }));
        checker.check_access();
        let (violations, count) = checker.violations();
        assert_eq!(count, 1, "only the stale incarnation's 202: {violations:?}");
        assert_eq!(violations[0].invariant, inv::ACCESS_GRANTED);
    }

    fn ask_as(who: AsUser, need: AccessNeed) -> AccessAsk {
        AccessAsk { name: "u".into(), who, need }
    }

    #[test]
    fn over_http_the_credentials_of_a_create_are_its_incarnation_s_only() {
        let mut checker = Checker::new(true);
        let at = |index, u| NodeEvent::UserApplied { index, change: UserApplied::Put(u) };
        let marker = |n: &'static str| (Action::Consume, n);
        checker.on_event(0, &at(3, user(1, &[(Action::Produce, "*"), marker("incarnation.1")])));
        let removed = UserApplied::Removed { name: "u".into(), id: UserId(1) };
        checker.on_event(0, &NodeEvent::UserApplied { index: 4, change: removed });
        checker.on_event(0, &at(5, user(2, &[(Action::Produce, "*"), marker("incarnation.2")])));
        // A grant change drops the marker: the incarnation is still the one create 2 made.
        checker.on_event(0, &at(6, user(2, &[(Action::Produce, "*")])));
        let created = |n: u64| {
            let topics = TopicPattern::parse(&format!("incarnation.{n}")).expect("valid");
            AsUser::CreatedWith(Grant { action: Action::Consume, topics })
        };
        let produced = ClientReply::Produced { accepted: 1 };
        let unknown = ClientReply::Error(ClientError::Unauthenticated("who".into()));
        for (request, n, reply) in [(1, 2, &produced), (2, 1, &unknown), (3, 3, &unknown)] {
            checker.access_asked(RequestId(request), 0, ask_as(created(n), produce_to("t")));
            checker.access_answered(RequestId(request), Some(reply));
        }
        checker.check_access();
        assert_eq!(checker.violations().1, 0, "{:?}", checker.violations().0);
        // Create 1's credentials taken for create 2's incarnation; create 2's refused.
        checker.access_asked(RequestId(4), 0, ask_as(created(1), produce_to("t")));
        checker.access_answered(RequestId(4), Some(&produced));
        checker.access_asked(RequestId(5), 0, ask_as(created(2), produce_to("t")));
        checker.access_answered(RequestId(5), Some(&unknown));
        checker.check_access();
        let (violations, count) = checker.violations();
        assert_eq!(count, 2, "{violations:?}");
        assert_eq!(violations[0].invariant, inv::ACCESS_GRANTED);
        assert_eq!(violations[1].invariant, inv::ACCESS_REFUSED);
        assert_eq!(checker.counters.access_probes_judged, 5);
    }

    #[test]
    fn the_admin_is_refused_only_before_its_node_holds_it_and_a_restart_forgets_where_it_stood() {
        let mut checker = Checker::new(true);
        let admin = || ask_as(AsUser::Any, AccessNeed::ClusterAdmin);
        let unknown = ClientReply::Error(ClientError::Unauthenticated("who".into()));
        checker.access_asked(RequestId(1), 0, admin());
        checker.access_answered(RequestId(1), Some(&unknown));
        let put = UserApplied::Put(user(1, &[(Action::Admin, "*")]));
        checker.on_event(0, &NodeEvent::UserApplied { index: 2, change: put });
        checker.users_unknown(0); // a restart: the first request may meet users at index 0
        checker.access_asked(RequestId(2), 0, admin());
        checker.access_answered(RequestId(2), Some(&unknown));
        checker.on_event(0, &NodeEvent::UsersReplaced { index: 2 });
        checker.access_asked(RequestId(3), 0, admin());
        let empty = ClientReply::Topics { topics: vec![], next: None };
        checker.access_answered(RequestId(3), Some(&empty));
        checker.check_access();
        assert_eq!(checker.violations().1, 0, "{:?}", checker.violations().0);
        for (request, reply) in
            [(4, unknown), (5, ClientReply::Error(ClientError::Forbidden("no".into())))]
        {
            checker.access_asked(RequestId(request), 0, admin());
            checker.access_answered(RequestId(request), Some(&reply));
        }
        checker.check_access();
        let (violations, count) = checker.violations();
        assert_eq!(count, 2, "{violations:?}");
        assert!(violations.iter().all(|v| v.invariant == inv::ACCESS_REFUSED));
        assert_eq!(checker.counters.access_admin_judged, 5);
    }

    #[test]
    fn an_answer_arriving_after_its_process_died_is_judged_up_to_where_its_users_stood() {
        let mut checker = Checker::new(true);
        checker.access_asked(RequestId(1), 0, ask_as(AsUser::Id(UserId(1)), produce_to("t")));
        let put = UserApplied::Put(user(1, &[(Action::Produce, "*")]));
        checker.on_event(0, &NodeEvent::UserApplied { index: 6, change: put });
        checker.users_unknown(0); // the node restarts before its answer arrives
        checker.access_answered(RequestId(1), Some(&ClientReply::Produced { accepted: 1 }));
        checker.check_access();
        assert_eq!(checker.violations().1, 0, "{:?}", checker.violations().0);
    }
}
