//! The admin-answer check fails on deliberately wrong answers and passes a right history.

use narad_core::api::TopicInfo;
use narad_core::{
    ClientError, ClientReply, Instant, NodeEvent, RequestId, TopicApplied, TopicChange, TopicId,
};

use super::AdminAsk;
use crate::checker::{Checker, inv};

fn info(name: &str, id: u64, partitions: u32) -> TopicInfo {
    TopicInfo {
        name: name.into(),
        id: TopicId(id),
        partitions,
        retention_ms: None,
        retention_bytes: None,
        created_ms: 7,
        queue: Default::default(),
    }
}

fn applied(checker: &mut Checker, at: u64, index: u64, created: bool, topic: &TopicInfo) {
    let change = if created { TopicApplied::Created } else { TopicApplied::Deleted };
    report(checker, at, index, change, topic);
}

fn report(checker: &mut Checker, at: u64, index: u64, change: TopicApplied, topic: &TopicInfo) {
    checker.set_now(Instant(at));
    let event = NodeEvent::TopicApplied { index, change, topic: topic.clone() };
    checker.on_event(0, &event);
}

/// Asks at `asked`, answers at `answered`.
fn answer(
    checker: &mut Checker,
    request: u64,
    ask: AdminAsk,
    (asked, answered): (u64, u64),
    reply: ClientReply,
) {
    checker.set_now(Instant(asked));
    checker.admin_asked(RequestId(request), ask);
    checker.set_now(Instant(answered));
    checker.admin_answered(0, RequestId(request), Some(&reply));
}

fn create(name: &str, partitions: u32) -> AdminAsk {
    AdminAsk::Create { name: name.into(), partitions }
}

fn delete(name: &str, meant: u64) -> AdminAsk {
    AdminAsk::Delete { name: name.into(), meant: Some(TopicId(meant)) }
}

/// The admin-answer violations the verdict reports.
fn admin_violations(mut checker: Checker) -> Vec<String> {
    checker.verdict(true, 0);
    let (violations, _) = checker.violations();
    violations.iter().filter(|v| v.invariant == inv::ADMIN).map(|v| v.detail.clone()).collect()
}

/// A created, then deleted: every answer matches the history.
fn right_history() -> Checker {
    let mut checker = Checker::new(false);
    let a = info("a", 1, 2);
    answer(&mut checker, 1, create("a", 2), (10, 30), ClientReply::TopicCreated(a.clone()));
    applied(&mut checker, 20, 5, true, &a);
    let conflict = ClientReply::Error(ClientError::Conflict("exists".into()));
    answer(&mut checker, 2, create("a", 2), (40, 50), conflict);
    applied(&mut checker, 70, 9, false, &a);
    answer(&mut checker, 3, delete("a", 1), (60, 80), ClientReply::TopicDeleted);
    let gone = ClientReply::Error(ClientError::NotFound("gone".into()));
    answer(&mut checker, 4, delete("a", 1), (90, 95), gone);
    checker
}

#[test]
fn a_history_whose_answers_match_the_applied_commands_passes() {
    assert_eq!(admin_violations(right_history()), Vec::<String>::new());
}

#[test]
fn a_201_naming_an_incarnation_never_created_is_a_violation() {
    let mut checker = right_history();
    let phantom = info("b", 4, 1);
    answer(&mut checker, 5, create("b", 1), (100, 110), ClientReply::TopicCreated(phantom));
    let found = admin_violations(checker);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("no applied create made that incarnation"), "{found:?}");
}

#[test]
fn a_204_for_an_incarnation_still_listed_is_a_violation() {
    let mut checker = right_history();
    let b = info("b", 2, 1);
    applied(&mut checker, 100, 12, true, &b);
    answer(&mut checker, 5, delete("b", 2), (110, 120), ClientReply::TopicDeleted);
    let found = admin_violations(checker);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("no delete of that name was applied"), "{found:?}");
}

#[test]
fn a_204_for_another_incarnation_than_the_one_meant_is_a_violation() {
    let mut checker = Checker::new(true);
    let (first, second) = (info("c", 1, 1), info("c", 2, 1));
    applied(&mut checker, 10, 3, true, &first);
    applied(&mut checker, 20, 4, false, &first);
    applied(&mut checker, 30, 5, true, &second);
    applied(&mut checker, 45, 6, false, &second);
    answer(&mut checker, 1, delete("c", 1), (40, 50), ClientReply::TopicDeleted);
    let found = admin_violations(checker);
    assert!(found.iter().any(|f| f.contains("the client meant #1")), "{found:?}");
}

#[test]
fn a_create_answered_as_a_delete_or_naming_another_topic_is_a_violation() {
    let mut checker = Checker::new(true);
    let d = info("d", 1, 3);
    applied(&mut checker, 10, 3, true, &d);
    answer(&mut checker, 1, create("e", 3), (5, 20), ClientReply::TopicCreated(d));
    answer(&mut checker, 2, create("f", 1), (30, 40), ClientReply::TopicDeleted);
    let found = admin_violations(checker);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("names another topic"), "{found:?}");
    assert!(found[1].contains("another kind of request"), "{found:?}");
}

#[test]
fn a_409_while_the_name_was_never_live_is_a_violation() {
    let mut checker = Checker::new(true);
    let conflict = ClientReply::Error(ClientError::Conflict("exists".into()));
    answer(&mut checker, 1, create("g", 1), (5, 20), conflict);
    let found = admin_violations(checker);
    assert!(found.iter().any(|f| f.contains("no incarnation of the name was live")), "{found:?}");
}

#[test]
fn replicas_disagreeing_on_an_index_and_ambiguous_answers() {
    let mut checker = Checker::new(true);
    applied(&mut checker, 10, 3, true, &info("h", 1, 1));
    applied(&mut checker, 11, 3, true, &info("h", 1, 2));
    let unavailable = ClientReply::Error(ClientError::Unavailable("lost".into()));
    answer(&mut checker, 1, create("i", 1), (20, 30), unavailable);
    let found = admin_violations(checker);
    assert_eq!(found.len(), 1, "a 503 is allowed either way: {found:?}");
    assert!(found[0].contains("another replica"), "{found:?}");
}

fn retention(ms: u64) -> TopicChange {
    TopicChange { retention_ms: Some(ms), retention_bytes: None }
}

fn update(name: &str, change: TopicChange) -> AdminAsk {
    AdminAsk::Update { name: name.into(), change, valid: true }
}

/// One node: `u` created, updated to 5 s through a PATCH answered 200, then looked up.
fn updated_history() -> (Checker, TopicInfo, TopicInfo) {
    let mut checker = Checker::new(false);
    let created = info("u", 1, 2);
    applied(&mut checker, 10, 3, true, &created);
    let after = retention(5_000).applied_to(&created);
    report(&mut checker, 30, 4, TopicApplied::Updated, &after);
    let ok = ClientReply::TopicUpdated(after.clone());
    answer(&mut checker, 1, update("u", retention(5_000)), (20, 40), ok);
    let shown = ClientReply::Topic(after.clone(), Vec::new());
    answer(&mut checker, 2, AdminAsk::Lookup { name: "u".into() }, (50, 55), shown);
    (checker, created, after)
}

#[test]
fn updates_answered_as_applied_pass() {
    let (mut checker, _, after) = updated_history();
    // A deliberately invalid update refused, a valid one to a name never created: 404.
    let bad = AdminAsk::Update { name: "u".into(), change: retention(1), valid: false };
    let refused = ClientReply::Error(ClientError::BadRequest("retention_ms".into()));
    answer(&mut checker, 3, bad, (60, 61), refused);
    let gone = ClientReply::Error(ClientError::NotFound("gone".into()));
    answer(&mut checker, 4, update("nope", retention(1_000)), (62, 63), gone);
    // Clearing the size limit of a topic that had none keeps every other field.
    let clear = TopicChange { retention_ms: None, retention_bytes: Some(None) };
    report(&mut checker, 70, 5, TopicApplied::Updated, &after);
    answer(&mut checker, 5, update("u", clear), (65, 75), ClientReply::TopicUpdated(after));
    assert_eq!(admin_violations(checker), Vec::<String>::new());
}

#[test]
fn a_200_to_a_patch_with_values_not_asked_is_a_violation() {
    let (mut checker, created, _) = updated_history();
    // The node applied (and answered) 6 s where the client asked 7 s.
    let wrong = retention(6_000).applied_to(&created);
    report(&mut checker, 80, 6, TopicApplied::Updated, &wrong);
    answer(
        &mut checker,
        3,
        update("u", retention(7_000)),
        (70, 90),
        ClientReply::TopicUpdated(wrong),
    );
    let found = admin_violations(checker);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("should have made"), "{found:?}");
}

#[test]
fn a_200_naming_an_incarnation_no_longer_live_is_a_violation() {
    let (mut checker, created, _) = updated_history();
    applied(&mut checker, 60, 5, false, &created);
    applied(&mut checker, 62, 6, true, &info("u", 2, 1));
    // A late update applied to the deleted incarnation #1 instead of being refused.
    let late = retention(9_000).applied_to(&created);
    report(&mut checker, 70, 7, TopicApplied::Updated, &late);
    answer(
        &mut checker,
        3,
        update("u", retention(9_000)),
        (65, 75),
        ClientReply::TopicUpdated(late),
    );
    let found = admin_violations(checker);
    assert!(found.iter().any(|f| f.contains("while the name held #2")), "{found:?}");
}

#[test]
fn a_200_for_an_update_never_applied_and_a_stale_lookup_are_violations() {
    let (mut checker, created, _) = updated_history();
    let phantom = retention(8_000).applied_to(&created);
    answer(
        &mut checker,
        3,
        update("u", retention(8_000)),
        (60, 70),
        ClientReply::TopicUpdated(phantom),
    );
    // One node: a lookup that arrived after the update applied still shows the old version.
    let stale = ClientReply::Topic(created, Vec::new());
    answer(&mut checker, 4, AdminAsk::Lookup { name: "u".into() }, (80, 85), stale);
    let found = admin_violations(checker);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("no update applied during the request"), "{found:?}");
    assert!(found[1].contains("a later update was applied before the lookup"), "{found:?}");
}

#[test]
fn a_404_or_400_to_a_valid_patch_of_a_live_topic_is_a_violation() {
    let (mut checker, _, _) = updated_history();
    let gone = ClientReply::Error(ClientError::NotFound("gone".into()));
    answer(&mut checker, 3, update("u", retention(2_000)), (60, 70), gone);
    let refused = ClientReply::Error(ClientError::BadRequest("no".into()));
    answer(&mut checker, 4, update("u", retention(2_000)), (71, 72), refused);
    let found = admin_violations(checker);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("the name was live throughout"), "{found:?}");
    assert!(found[1].contains("a valid update was refused"), "{found:?}");
}
