//! The workload's model of which topics exist. Produces and reads target only topics whose
//! create was acknowledged and whose delete was not yet requested, so on one node the checker
//! always knows which incarnation a request reached.

use std::collections::{BTreeMap, BTreeSet};

use narad_core::TopicId;

/// The topic queue topics send their dead letters to, when a seed gives them one. Clients never
/// produce to it, read it, consume it or delete it; only the final read reads it.
pub const DEAD_LETTER_TOPIC: &str = "dead-letters";

/// What the workload believes about one topic name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicState {
    /// A create was sent; no answer yet (or an ambiguous one: look it up).
    Creating { partitions: u32, ambiguous: bool },
    /// The create was acknowledged.
    Live { id: TopicId, partitions: u32 },
    /// A delete was sent for this incarnation.
    Deleting { id: TopicId },
    /// The delete was acknowledged (or the topic was found gone).
    Gone,
}

/// Topic names and their states.
#[derive(Clone, Debug, Default)]
pub struct TopicModel {
    topics: BTreeMap<String, TopicState>,
    next_name: u32,
    /// Incarnations a delete was sent for: a lagging replica may still show them, but they are
    /// never live again.
    deleted: BTreeSet<TopicId>,
}

impl TopicModel {
    /// The state of `name`.
    pub fn get(&self, name: &str) -> Option<TopicState> {
        self.topics.get(name).copied()
    }

    /// Sets the state of `name`.
    pub fn set(&mut self, name: &str, state: TopicState) {
        if let TopicState::Deleting { id } = state {
            self.deleted.insert(id);
        }
        self.topics.insert(name.to_string(), state);
    }

    /// True when a delete was sent for incarnation `id` (a lookup showing it is stale).
    pub fn is_deleted(&self, id: TopicId) -> bool {
        self.deleted.contains(&id)
    }

    /// A fresh name never used before.
    pub fn fresh_name(&mut self) -> String {
        self.next_name += 1;
        format!("t{}", self.next_name)
    }

    /// Live topics as (name, id, partitions), in name order: the ones clients work on (not
    /// the dead-letter topic).
    pub fn live(&self) -> Vec<(String, TopicId, u32)> {
        let mut live = self.all_live();
        live.retain(|(name, ..)| name != DEAD_LETTER_TOPIC);
        live
    }

    /// Every live topic, the dead-letter topic included (the final read's list).
    pub fn all_live(&self) -> Vec<(String, TopicId, u32)> {
        self.topics
            .iter()
            .filter_map(|(name, state)| match state {
                TopicState::Live { id, partitions } => Some((name.clone(), *id, *partitions)),
                _ => None,
            })
            .collect()
    }

    /// Names whose topics are gone (candidates for re-creation under the same name).
    pub fn gone(&self) -> Vec<String> {
        let mut gone = self.names_where(|s| matches!(s, TopicState::Gone));
        gone.retain(|name| name != DEAD_LETTER_TOPIC);
        gone
    }

    /// Names with a create or delete still unanswered.
    pub fn unsettled(&self) -> Vec<String> {
        self.names_where(|s| matches!(s, TopicState::Creating { .. } | TopicState::Deleting { .. }))
    }

    fn names_where(&self, pred: impl Fn(&TopicState) -> bool) -> Vec<String> {
        self.topics.iter().filter(|(_, s)| pred(s)).map(|(n, _)| n.clone()).collect()
    }

    /// The live incarnation named `name`.
    pub fn live_id(&self, name: &str) -> Option<TopicId> {
        match self.get(name)? {
            TopicState::Live { id, .. } => Some(id),
            _ => None,
        }
    }
}
