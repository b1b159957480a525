//! The memory of deleted incarnations, shared by topics and users: for each name, the last
//! incarnation deleted, so that a create whose proposer looked before that delete is refused as
//! late instead of bringing the name back (docs/design.md §3, §8). Bounded: past `MAX_TOMBSTONES`
//! the oldest is dropped and `floor` remembers the newest id dropped, and a create that looked
//! before the floor is refused too ("retry").

use std::collections::BTreeMap;

use super::command::{get_str, put_str, put_u32, put_u64};
use crate::codec::Reader;

/// Deleted incarnations remembered per kind (topics, users).
pub(super) const MAX_TOMBSTONES: usize = 1_024;

/// An incarnation id: numbered from 1, never reused.
pub(super) trait Incarnation: Copy + Ord {
    fn number(self) -> u64;
    fn from_number(number: u64) -> Self;
}

impl Incarnation for crate::ids::TopicId {
    fn number(self) -> u64 {
        self.0
    }

    fn from_number(number: u64) -> Self {
        crate::ids::TopicId(number)
    }
}

/// Deleted incarnations by name and by id, and the floor of those forgotten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tombstones<Id> {
    by_name: BTreeMap<String, Id>,
    by_id: BTreeMap<Id, String>,
    floor: u64,
}

impl<Id> Default for Tombstones<Id> {
    fn default() -> Self {
        Tombstones { by_name: BTreeMap::new(), by_id: BTreeMap::new(), floor: 0 }
    }
}

impl<Id: Incarnation> Tombstones<Id> {
    /// Remembers that incarnation `id` of `name` was deleted (the oldest dropped past the bound).
    pub(super) fn bury(&mut self, name: &str, id: Id) {
        if let Some(older) = self.by_name.insert(name.to_string(), id) {
            self.by_id.remove(&older);
        }
        self.by_id.insert(id, name.to_string());
        while self.by_id.len() > MAX_TOMBSTONES {
            let (oldest, name) = self.by_id.pop_first().expect("over the bound");
            self.by_name.remove(&name);
            self.floor = self.floor.max(oldest.number());
        }
    }

    /// Whether a create of `name` whose proposer saw `seen_next_id` as the next id is late: an
    /// incarnation of the name was deleted since, or the proposer looked before the floor.
    pub(super) fn is_late(&self, name: &str, seen_next_id: u64) -> bool {
        let deleted_since = self.by_name.get(name).is_some_and(|id| id.number() >= seen_next_id);
        deleted_since || seen_next_id <= self.floor
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    #[cfg(test)]
    pub(super) fn holds(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The floor, then each (id, name) in id order.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.floor);
        put_u32(out, self.by_id.len() as u32);
        for (id, name) in &self.by_id {
            put_u64(out, id.number());
            put_str(out, name);
        }
    }

    /// Inverse of `encode` (the image's canonical check refuses anything `encode` would not
    /// write back).
    pub(super) fn decode(r: &mut Reader<'_>) -> Option<Tombstones<Id>> {
        let mut tombstones = Tombstones { floor: r.u64()?, ..Tombstones::default() };
        for _ in 0..r.u32()? {
            let id = Id::from_number(r.u64()?);
            let name = get_str(r)?;
            tombstones.by_name.insert(name.clone(), id);
            tombstones.by_id.insert(id, name);
        }
        Some(tombstones)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TopicId;

    #[test]
    fn the_memory_is_bounded_by_name_and_id_alike_and_the_floor_refuses_older_creates() {
        let mut tombstones = Tombstones::<TopicId>::default();
        for i in 0..=MAX_TOMBSTONES as u64 {
            tombstones.bury(&format!("t{i}"), TopicId(i + 1));
        }
        assert_eq!(tombstones.len(), MAX_TOMBSTONES);
        assert_eq!(tombstones.by_name.len(), MAX_TOMBSTONES, "both maps drop the same entry");
        assert!(!tombstones.holds("t0") && tombstones.holds("t1"));
        assert!(tombstones.is_late("t0", 1), "forgotten, but below the floor");
        assert!(tombstones.is_late("t5", 6), "deleted since the proposer looked");
        assert!(!tombstones.is_late("t5", 7));
        tombstones.bury("t5", TopicId(5_000)); // a later incarnation of a name replaces its entry
        assert_eq!(tombstones.by_name.len(), tombstones.by_id.len());
        let mut out = Vec::new();
        tombstones.encode(&mut out);
        assert_eq!(Tombstones::decode(&mut Reader::new(&out)), Some(tombstones));
    }
}
