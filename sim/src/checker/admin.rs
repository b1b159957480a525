//! Admin answers against the metastore's history. Every node reports each topic create, update
//! or delete its replica applies, with the entry's Raft log index (`NodeEvent::TopicApplied`); together
//! they are the sequence of applied topic commands (the same index must carry the same change
//! on every replica, and an incarnation id is created once). Every definite answer to a create,
//! delete or lookup is kept with the time its request reached the node and the time the answer
//! came back, and checked once the run is over (`check_admin`, from the verdict):
//!
//! - a 201 names what was asked (name, partitions) and an incarnation that a create applied
//!   during the request created, exactly as answered; no two 201s name one incarnation;
//! - a 204 answers a delete that was applied during the request, of the incarnation the client
//!   meant; a create is never answered 204, a delete never 201;
//! - a 409 to a create: an incarnation of the name was live at some moment of the request;
//! - a lookup names the topic asked and an incarnation created by then, as one of its versions
//!   (the create, or an update of it) applied by then;
//! - a 200 to an update (`update.rs`) names an update applied during the request, to the
//!   incarnation live under the name at its log index, with the values asked and the others as
//!   they were; a 400 answers only a deliberately invalid update;
//! - one node only (no replica can lag): a lookup never shows a version superseded (by an update
//!   or the delete) before it was asked, and a 404 (delete, lookup, update) is consistent with
//!   some moment of the request. In a cluster a lagging replica may answer 404 from its own
//!   catalogue.
//!
//! Ambiguous answers (5xx, 429, timeouts, resets) are allowed either way and not kept. Times
//! are those of the first replica to report a change (the proposer's apply is never later than
//! its answer).

use std::collections::BTreeMap;

use narad_core::api::TopicInfo;
use narad_core::{ClientReply, Instant, RequestId, TopicApplied, TopicChange, TopicId};

use super::{Checker, inv};

/// What an admin request asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAsk {
    Create {
        name: String,
        partitions: u32,
    },
    /// `meant`: the incarnation the client believed live when it asked.
    Delete {
        name: String,
        meant: Option<TopicId>,
    },
    Lookup {
        name: String,
    },
    /// `valid`: the workload made the values invalid on purpose (a 400 is the only answer).
    Update {
        name: String,
        change: TopicChange,
        valid: bool,
    },
}

/// A definite answer to an admin request.
#[derive(Clone, Debug)]
pub(super) struct AdminAnswer {
    ask: AdminAsk,
    node: u32,
    sent: Instant,
    answered: Instant,
    reply: ClientReply,
}

/// One applied topic change, as first reported.
#[derive(Clone, Debug)]
struct Change {
    kind: TopicApplied,
    topic: TopicInfo,
    at: Instant,
}

impl Change {
    fn created(&self) -> bool {
        self.kind == TopicApplied::Created
    }

    fn deleted(&self) -> bool {
        self.kind == TopicApplied::Deleted
    }
}

/// The applied topic history and the answers to check against it.
#[derive(Default)]
pub(super) struct AdminHistory {
    changes: BTreeMap<u64, Change>,
    asked: BTreeMap<RequestId, (AdminAsk, Instant)>,
    answers: Vec<AdminAnswer>,
}

impl Checker {
    /// Node `node`'s replica applied a topic change at log `index`.
    pub(super) fn topic_applied(
        &mut self,
        node: u32,
        index: u64,
        kind: TopicApplied,
        topic: &TopicInfo,
    ) {
        if let Some(first) = self.admin.changes.get(&index) {
            if first.kind != kind || first.topic != *topic {
                let detail = format!(
                    "n{node} applied {} at index {index}, another replica {}",
                    describe(kind, topic),
                    describe(first.kind, &first.topic)
                );
                self.violation(inv::ADMIN, detail);
            }
            return;
        }
        let created = kind == TopicApplied::Created;
        let twice =
            created && self.admin.changes.values().any(|c| c.created() && c.topic.id == topic.id);
        if twice {
            let detail = format!("n{node}: incarnation #{} created a second time", topic.id.0);
            self.violation(inv::ADMIN, detail);
        }
        let change = Change { kind, topic: topic.clone(), at: self.now };
        self.admin.changes.insert(index, change);
    }

    /// An admin request reached a node now.
    pub fn admin_asked(&mut self, request: RequestId, ask: AdminAsk) {
        self.admin.asked.insert(request, (ask, self.now));
    }

    /// Node `node` answered admin request `request` now (`None`: no answer, ambiguous).
    pub fn admin_answered(&mut self, node: u32, request: RequestId, reply: Option<&ClientReply>) {
        let Some((ask, sent)) = self.admin.asked.remove(&request) else { return };
        let Some(reply) = reply.filter(|r| !is_ambiguous(r)) else { return };
        let answer = AdminAnswer { ask, node, sent, answered: self.now, reply: reply.clone() };
        self.admin.answers.push(answer);
    }

    /// Checks every kept answer against the applied history (see the module docs).
    pub(super) fn check_admin(&mut self) {
        let answers = std::mem::take(&mut self.admin.answers);
        let mut claimed: BTreeMap<TopicId, usize> = BTreeMap::new();
        for (i, answer) in answers.iter().enumerate() {
            if let (AdminAsk::Create { .. }, ClientReply::TopicCreated(info)) =
                (&answer.ask, &answer.reply)
                && let Some(other) = claimed.insert(info.id, i)
            {
                let detail =
                    format!("incarnation #{} answered 201 twice (answers {other}, {i})", info.id.0);
                self.violation(inv::ADMIN, detail);
            }
            if let Some(why) = self.judge(answer) {
                let detail = format!(
                    "n{}: {:?} answered {:?} (asked at {}, answered at {}): {why}",
                    answer.node, answer.ask, answer.reply, answer.sent.0, answer.answered.0
                );
                self.violation(inv::ADMIN, detail);
            }
        }
        self.admin.answers = answers;
    }

    /// Why `answer` is wrong, if it is.
    fn judge(&self, answer: &AdminAnswer) -> Option<String> {
        let window = (answer.sent, answer.answered);
        match (&answer.ask, &answer.reply) {
            (AdminAsk::Create { name, partitions }, ClientReply::TopicCreated(info)) => {
                self.judge_created(name, *partitions, info, window)
            }
            (AdminAsk::Delete { name, meant }, ClientReply::TopicDeleted) => {
                self.judge_deleted(name, *meant, window)
            }
            (AdminAsk::Lookup { name }, ClientReply::Topic(info, _)) => {
                self.judge_lookup(name, info, window)
            }
            (AdminAsk::Update { name, change, valid }, ClientReply::TopicUpdated(info)) => {
                self.judge_updated(name, change, *valid, info, window)
            }
            (ask, ClientReply::Error(error)) => self.judge_error(ask, error.http_status(), window),
            _ => Some("an answer of another kind of request".into()),
        }
    }

    fn judge_created(
        &self,
        name: &str,
        partitions: u32,
        info: &TopicInfo,
        (sent, answered): (Instant, Instant),
    ) -> Option<String> {
        if info.name != name || info.partitions != partitions {
            return Some("it names another topic than the one asked".into());
        }
        let Some(change) =
            self.admin.changes.values().find(|c| c.created() && c.topic.id == info.id)
        else {
            return Some("no applied create made that incarnation".into());
        };
        if change.topic != *info {
            return Some(format!("the applied create made {:?}", change.topic));
        }
        if change.at < sent || change.at > answered {
            return Some(format!("its create was applied at {}, outside the request", change.at.0));
        }
        None
    }

    fn judge_deleted(
        &self,
        name: &str,
        meant: Option<TopicId>,
        (sent, answered): (Instant, Instant),
    ) -> Option<String> {
        let deletes: Vec<&Change> = self
            .admin
            .changes
            .values()
            .filter(|c| c.deleted() && c.topic.name == name && (sent..=answered).contains(&c.at))
            .collect();
        let Some(first) = deletes.first() else {
            return Some("no delete of that name was applied during the request".into());
        };
        match meant {
            Some(id) if deletes.iter().all(|c| c.topic.id != id) => Some(format!(
                "the delete applied removed incarnation #{}, the client meant #{}",
                first.topic.id.0, id.0
            )),
            _ => None,
        }
    }

    fn judge_lookup(
        &self,
        name: &str,
        info: &TopicInfo,
        (sent, answered): (Instant, Instant),
    ) -> Option<String> {
        if info.name != name {
            return Some("it names another topic than the one asked".into());
        }
        let versions = self.versions(info.id);
        let Some(created) = versions.first() else {
            return Some("no applied create made that incarnation".into());
        };
        let shown: Vec<&Version> = versions.iter().filter(|v| *v.topic == *info).collect();
        if shown.is_empty() {
            return Some(format!(
                "it was created as {:?} and never updated to that",
                created.topic
            ));
        }
        if shown.iter().all(|v| v.from > answered) {
            return Some("it was created (or updated to that) after the answer".into());
        }
        // One node: the version shown was still current when the lookup arrived.
        let superseded = shown.iter().all(|v| v.until.is_some_and(|until| until < sent));
        (superseded && !self.cluster)
            .then(|| "its delete or a later update was applied before the lookup".into())
    }

    /// The versions of incarnation `id` in log order: its create, then each update, each with
    /// when it was applied and when the next update or the delete replaced it.
    pub(super) fn versions(&self, id: TopicId) -> Vec<Version<'_>> {
        let mut versions: Vec<Version<'_>> = Vec::new();
        for (index, change) in self.admin.changes.iter().filter(|(_, c)| c.topic.id == id) {
            if let Some(last) = versions.last_mut() {
                last.until.get_or_insert(change.at);
            }
            if !change.deleted() {
                let version =
                    Version { index: *index, topic: &change.topic, from: change.at, until: None };
                versions.push(version);
            }
        }
        versions
    }

    fn judge_error(
        &self,
        ask: &AdminAsk,
        status: u16,
        window: (Instant, Instant),
    ) -> Option<String> {
        match (ask, status) {
            (AdminAsk::Create { name, .. }, 409) => (!self.live_during(name, window))
                .then(|| "no incarnation of the name was live during the request".into()),
            // The workload flags a 400/413 to its valid creates itself.
            (AdminAsk::Create { .. }, 400 | 413) => None,
            (AdminAsk::Delete { name, .. } | AdminAsk::Lookup { name }, 404)
            | (AdminAsk::Update { name, .. }, 404) => {
                let consistent = self.cluster || self.absent_during(name, window);
                (!consistent).then(|| "the name was live throughout the request".into())
            }
            (AdminAsk::Update { valid, .. }, 400) => {
                valid.then(|| "a valid update was refused with 400".into())
            }
            _ => Some(format!("status {status} cannot answer this request")),
        }
    }

    fn deleted_at(&self, id: TopicId) -> Option<Instant> {
        self.admin.changes.values().find(|c| c.deleted() && c.topic.id == id).map(|c| c.at)
    }

    /// Some incarnation of `name` was live at a moment of `[sent, answered]`.
    fn live_during(&self, name: &str, (sent, answered): (Instant, Instant)) -> bool {
        self.admin.changes.values().any(|c| {
            c.created()
                && c.topic.name == name
                && c.at <= answered
                && self.deleted_at(c.topic.id).is_none_or(|gone| gone >= sent)
        })
    }

    /// `name` had no live incarnation at a moment of `[sent, answered]`: none was live when the
    /// request arrived, or one came or went during it.
    fn absent_during(&self, name: &str, (sent, answered): (Instant, Instant)) -> bool {
        let changed = self
            .admin
            .changes
            .values()
            .any(|c| c.topic.name == name && (sent..=answered).contains(&c.at));
        changed || !self.live_during(name, (sent, sent))
    }
}

/// Answers that may or may not have taken effect (or were turned away before anything could).
fn is_ambiguous(reply: &ClientReply) -> bool {
    matches!(reply, ClientReply::Error(e) if e.http_status() >= 500 || e.http_status() == 429)
}

fn describe(kind: TopicApplied, topic: &TopicInfo) -> String {
    let what = match kind {
        TopicApplied::Created => "create",
        TopicApplied::Updated => "update",
        TopicApplied::Deleted => "delete",
    };
    format!("{what} of {}#{}", topic.name, topic.id.0)
}

/// One version of an incarnation: what its create or an update made it, from when, until when.
pub(super) struct Version<'a> {
    index: u64,
    topic: &'a TopicInfo,
    from: Instant,
    until: Option<Instant>,
}

#[cfg(test)]
mod tests;
mod update;
