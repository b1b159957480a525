//! Grant checks against the users' history (docs/design.md §8). Every node reports each user
//! change its metastore replica applies with the entry's Raft log index (`UserApplied`), and the
//! index its users stand at after a recovery or an installed snapshot (`UsersReplaced`);
//! together the first reports of each index are the users' history, and each node's users are
//! that history up to the index it last reported. Two reports of one index must agree.
//!
//! The access client asks as some user incarnation for things whose only effect is the grant
//! check's verdict. Its request reached node `n` when `n`'s users stood at index `lo` and was
//! answered when they stood at `hi`: the node decided with one of the versions of the users
//! between the two. Checked once the run is over:
//!
//! - an allowed answer (2xx, or a 404 for a topic that never exists, which the check let
//!   through) needs a version in `lo..=hi` where the incarnation exists and its grants allow
//!   the request (`access-beyond-grants`: the node gave more than its state said);
//! - a 403 needs a version where the incarnation exists and its grants do not allow it, up to
//!   the furthest index any node stood at when it was answered (a partition's owner checks a
//!   forwarded read again, and may be ahead of the entry node);
//! - a 401 needs a version in `lo..=hi` where the incarnation does not exist;
//! - a listing of topics holds only names some version's grants cover.
//!
//! Anything else (5xx, 503 retry, timeouts) is ambiguous and allowed either way.

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
}

/// A request the access client made as a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessAsk {
    pub name: String,
    pub id: UserId,
    pub need: AccessNeed,
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
    node_index: BTreeMap<u32, u64>,
    asked: BTreeMap<RequestId, Asked>,
    answered: Vec<Judged>,
}

impl Checker {
    /// Node `node` applied `change` at log index `index`.
    pub(super) fn user_applied(&mut self, node: u32, index: u64, change: &UserApplied) {
        let history = &mut self.access;
        history.node_index.insert(node, index);
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
        self.access.node_index.insert(node, index);
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
            Some(ClientReply::Topics(topics)) => {
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
        let hi = self.access.node_index.get(&asked.node).copied().unwrap_or(0);
        let hi_any = self.access.node_index.values().copied().max().unwrap_or(0).max(hi);
        self.access.answered.push(Judged { asked, hi, hi_any, verdict });
    }

    /// Judges every answered probe (once the run is over).
    pub(super) fn check_access(&mut self) {
        let answered = std::mem::take(&mut self.access.answered);
        for judged in &answered {
            if let Err(detail) = self.access.judge(judged) {
                self.violation(detail.0, detail.1);
            }
        }
        self.counters.access_probes_judged += answered.len() as u64;
    }
}

impl AccessHistory {
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

    fn judge(&self, judged: &Judged) -> Result<(), (&'static str, String)> {
        let Judged { asked, hi, hi_any, verdict } = judged;
        let ask = &asked.ask;
        let current = |v: &Option<UserInfo>| v.as_ref().filter(|u| u.id == ask.id).cloned();
        let versions = self.versions(&ask.name, asked.lo, *hi);
        let held: Vec<UserInfo> = versions.iter().filter_map(current).collect();
        let allowed = |user: &UserInfo| model_allows(&user.grants, &ask.need);
        let found = match verdict {
            Verdict::Allowed => held.iter().any(allowed),
            Verdict::Unknown => versions.iter().any(|v| current(v).is_none()),
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
            "n{}: {verdict:?} for {} (incarnation {}) needing {:?}, users at index {}..={} ({} \
             versions: {:?})",
            asked.node,
            ask.name,
            ask.id.0,
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
        AccessNeed::List => true,
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
        let ask = AccessAsk { name: "u".into(), id: UserId(1), need };
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
        let ask = AccessAsk { name: "u".into(), id: UserId(1), need: produce_to("t") };
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
}
