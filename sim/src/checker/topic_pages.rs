//! Pages of the topic list (`ClientOp::ListTopics`, docs/design.md §2): each page answered
//! during a run is judged on its own, and a final read pages through the whole list, which must
//! then hold every acknowledged live topic once (`final_read.rs` and tier 2's final phase check
//! that with these rules).
//!
//! A page covers the next `limit` names after the token, in name order, before the caller's
//! grants filter it. So: its names ascend strictly and all sort after the token; it holds at
//! most the (clamped) limit; a next token sorts after the token and at or after every name
//! listed; and a caller who sees every topic gets a next token only on a full page, naming the
//! page's last topic.

use narad_core::ClientOp;
use narad_core::api::TopicInfo;
use narad_core::constants::TOPIC_PAGE_MAX;

use super::{Checker, inv};

/// What a client asked of one page.
#[derive(Clone, Debug)]
pub struct PageAsked {
    pub after: Option<String>,
    pub limit: u32,
    /// The caller may see every topic (trusted, an admin, or access control off).
    pub sees_all: bool,
}

impl PageAsked {
    /// The first page of `limit` topics, as a caller who sees every topic asks for it.
    pub fn first(limit: u32) -> PageAsked {
        PageAsked { after: None, limit, sees_all: true }
    }

    /// The page after this one, given the `next` token its answer carried: `None` at the end,
    /// or when the token does not move on (`topic_page` reports that; going on would loop).
    pub fn following(&self, next: Option<String>) -> Option<PageAsked> {
        let next = next.filter(|next| self.after.as_ref().is_none_or(|after| next > after))?;
        Some(PageAsked { after: Some(next), ..self.clone() })
    }

    /// The request for this page.
    pub fn op(&self) -> ClientOp {
        ClientOp::ListTopics { after: self.after.clone(), limit: self.limit }
    }
}

/// What is wrong with a page, if anything.
pub fn page_fault(asked: &PageAsked, topics: &[TopicInfo], next: Option<&str>) -> Option<String> {
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    let limit = asked.limit.clamp(1, TOPIC_PAGE_MAX) as usize;
    let after = asked.after.as_deref();
    let shown = || format!("page after {after:?} limit {}: {names:?} next {next:?}", asked.limit);
    if names.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Some(format!("names out of order or repeated: {}", shown()));
    }
    if let (Some(after), Some(first)) = (after, names.first())
        && *first <= after
    {
        return Some(format!("a name at or before the token: {}", shown()));
    }
    if names.len() > limit {
        return Some(format!("more names than the limit ({limit}): {}", shown()));
    }
    let next = next?;
    if after.is_some_and(|after| next <= after) || names.last().is_some_and(|last| next < *last) {
        return Some(format!("a next token that does not move on: {}", shown()));
    }
    if asked.sees_all && (names.len() < limit || names.last() != Some(&next)) {
        return Some(format!("a next token other than a full page's last name: {}", shown()));
    }
    None
}

impl Checker {
    /// A page of the topic list answered `topics` and `next` to `asked`.
    pub fn topic_page(&mut self, asked: &PageAsked, topics: &[TopicInfo], next: Option<&str>) {
        self.counters.topic_pages += 1;
        if let Some(detail) = page_fault(asked, topics, next) {
            self.violation(inv::TOPIC_PAGE, detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(names: &[&str]) -> Vec<TopicInfo> {
        let topic = |name: &&str| TopicInfo {
            name: name.to_string(),
            id: narad_core::TopicId(1),
            partitions: 1,
            retention_ms: None,
            retention_bytes: None,
            created_ms: 0,
            queue: Default::default(),
        };
        names.iter().map(topic).collect()
    }

    fn asked(after: Option<&str>, limit: u32, sees_all: bool) -> PageAsked {
        PageAsked { after: after.map(str::to_string), limit, sees_all }
    }

    #[test]
    fn a_well_formed_page_passes() {
        let page = topics(&["b", "c"]);
        assert_eq!(page_fault(&asked(Some("a"), 2, true), &page, Some("c")), None);
        assert_eq!(page_fault(&asked(Some("a"), 3, true), &page, None), None, "the last page");
        // Filtered by grants: fewer names, the token past them.
        assert_eq!(page_fault(&asked(None, 3, false), &topics(&["b"]), Some("d")), None);
        assert_eq!(page_fault(&asked(None, 3, false), &[], Some("d")), None, "empty, more to come");
    }

    #[test]
    fn the_following_page_starts_at_a_token_that_moves_on() {
        let first = PageAsked::first(2);
        let second = first.following(Some("b".into())).expect("a token");
        assert_eq!((second.after.as_deref(), second.limit), (Some("b"), 2));
        assert!(second.following(Some("b".into())).is_none(), "a token that stays put ends it");
        assert!(second.following(None).is_none(), "the last page");
    }

    #[test]
    fn each_broken_rule_is_named() {
        let cases: [(PageAsked, &[&str], Option<&str>, &str); 6] = [
            (asked(None, 5, true), &["b", "a"], None, "out of order"),
            (asked(None, 5, true), &["a", "a"], None, "out of order"),
            (asked(Some("b"), 5, true), &["b", "c"], None, "at or before the token"),
            (asked(None, 1, true), &["a", "b"], None, "more names than the limit"),
            (asked(Some("b"), 2, false), &[], Some("b"), "does not move on"),
            (asked(None, 2, true), &["a", "b"], Some("c"), "a full page's last name"),
        ];
        for (asked, names, next, expected) in cases {
            let fault = page_fault(&asked, &topics(names), next).expect(expected);
            assert!(fault.contains(expected), "{fault}");
        }
        let short = page_fault(&asked(None, 3, true), &topics(&["a"]), Some("a"));
        assert!(short.expect("a short page with a token").contains("full page"));
    }
}
