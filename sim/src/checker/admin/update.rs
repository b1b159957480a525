//! Judging a 200 to a topic update (`PATCH /v1/topics/{t}`) against the applied history: the
//! answer must be an update applied while the request was open, to the incarnation that was
//! live under the name at that entry's log index, carrying the values asked and every other
//! field as the version before it had them.

use narad_core::api::TopicInfo;
use narad_core::{Instant, TopicApplied, TopicChange};

use super::Version;
use crate::checker::Checker;

impl Checker {
    pub(super) fn judge_updated(
        &self,
        name: &str,
        change: &TopicChange,
        valid: bool,
        info: &TopicInfo,
        (sent, answered): (Instant, Instant),
    ) -> Option<String> {
        if !valid {
            return Some("an invalid update was answered 200".into());
        }
        if info.name != name {
            return Some("it names another topic than the one asked".into());
        }
        let versions = self.versions(info.id);
        let applied: Vec<(usize, &Version<'_>)> = versions
            .iter()
            .enumerate()
            .skip(1) // the first version is the create
            .filter(|(_, v)| *v.topic == *info && (sent..=answered).contains(&v.from))
            .collect();
        let Some(&(at, update)) = applied.first() else {
            return Some("no update applied during the request made the topic answered".into());
        };
        if let Some(why) = self.not_live_at(name, info, update.index) {
            return Some(why);
        }
        let expected = change.applied_to(versions[at - 1].topic);
        (expected != *info).then(|| format!("the update asked should have made {expected:?}"))
    }

    /// Why incarnation `info.id` was not the one live under `name` at log index `index`.
    fn not_live_at(&self, name: &str, info: &TopicInfo, index: u64) -> Option<String> {
        let mut before = self.admin.changes.range(..index).map(|(_, c)| c);
        let live = before.rfind(|c| c.topic.name == name);
        match live {
            Some(c) if c.kind != TopicApplied::Deleted && c.topic.id == info.id => None,
            Some(c) if c.kind != TopicApplied::Deleted => Some(format!(
                "the update applied to #{} while the name held #{}",
                info.id.0, c.topic.id.0
            )),
            _ => {
                Some(format!("the update applied to #{} while no incarnation was live", info.id.0))
            }
        }
    }
}
