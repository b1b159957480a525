//! A topic's queue settings (docs/design.md §4.8): the lease a receive gives, and where a message
//! that keeps failing goes. Set when the topic is created, replicated with it through the
//! metastore, and read by every partition owner; validated here so the HTTP layer, a forwarded
//! create and the metastore's apply refuse the same values with the same words.

use super::ClientError;
use crate::codec::Reader;

/// Shortest lease a topic may set: below it a worker cannot even answer before it expires.
pub const MIN_VISIBILITY_TIMEOUT_MS: u64 = 100;
/// Longest lease a topic may set (12 hours).
pub const MAX_VISIBILITY_TIMEOUT_MS: u64 = 12 * 60 * 60 * 1000;
/// Most deliveries a topic may allow before it moves a message to its dead-letter topic.
pub const MAX_MAX_DELIVERIES: u32 = 1_000;

/// How a topic's queue consumers are served. The default is what a topic created without any of
/// these gets: the node's default lease, and no dead-letter topic (a message is offered again
/// for as long as it is not acked).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueSettings {
    /// The lease a receive gives; `None`: the node's default (30 s unless configured).
    pub visibility_timeout_ms: Option<u64>,
    /// After this many deliveries without an ack a message is moved to the dead-letter topic
    /// instead of being offered again.
    pub dead_letter: Option<DeadLetter>,
}

/// Where a topic's messages go after `max_deliveries` deliveries without an ack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeadLetter {
    pub max_deliveries: u32,
    pub topic: String,
}

impl QueueSettings {
    /// The settings a create asked for, with `visibility_timeout_ms: 0` meaning the default (as
    /// in the v1 API), or the reason they are refused. `max_deliveries` and `dead_letter_topic`
    /// come together or not at all.
    pub fn requested(
        visibility_timeout_ms: Option<u64>,
        max_deliveries: Option<u32>,
        dead_letter_topic: Option<String>,
    ) -> Result<QueueSettings, ClientError> {
        let dead_letter = match (max_deliveries, dead_letter_topic) {
            (None, None) => None,
            (Some(max_deliveries), Some(topic)) => Some(DeadLetter { max_deliveries, topic }),
            (Some(_), None) => return Err(bad("max_deliveries needs a dead_letter_topic")),
            (None, Some(_)) => return Err(bad("dead_letter_topic needs max_deliveries")),
        };
        let settings = QueueSettings {
            visibility_timeout_ms: visibility_timeout_ms.filter(|&ms| ms != 0),
            dead_letter,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Refuses values no topic may have (a replica applying a create checks them again: a
    /// command is validated where it is applied, not only where it was asked for).
    pub fn validate(&self) -> Result<(), ClientError> {
        if let Some(ms) = self.visibility_timeout_ms
            && !(MIN_VISIBILITY_TIMEOUT_MS..=MAX_VISIBILITY_TIMEOUT_MS).contains(&ms)
        {
            return Err(bad(&format!(
                "visibility_timeout_ms must be 0 (the default) or between \
                 {MIN_VISIBILITY_TIMEOUT_MS} and {MAX_VISIBILITY_TIMEOUT_MS}, got {ms}"
            )));
        }
        if let Some(dead) = &self.dead_letter {
            if !(1..=MAX_MAX_DELIVERIES).contains(&dead.max_deliveries) {
                return Err(bad(&format!(
                    "max_deliveries must be between 1 and {MAX_MAX_DELIVERIES}, got {}",
                    dead.max_deliveries
                )));
            }
            crate::meta::validate_name(&dead.topic).map_err(|error| match error {
                ClientError::BadRequest(why) => bad(&format!("dead_letter_topic: {why}")),
                other => other,
            })?;
        }
        Ok(())
    }

    /// True for a topic created without any queue setting.
    pub fn is_default(&self) -> bool {
        *self == QueueSettings::default()
    }

    /// The lease a receive gives, `default_ms` when the topic sets none.
    pub fn visibility_ms(&self, default_ms: u64) -> u64 {
        self.visibility_timeout_ms.unwrap_or(default_ms)
    }

    /// Appends the settings' bytes: the lease (`u64::MAX` for none), the delivery limit
    /// (`u32::MAX` for none) and the dead-letter topic's name (`u32` length, then UTF-8; empty
    /// with no limit). Each value has one spelling, so a decoded encoding re-encodes the same.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.visibility_timeout_ms.unwrap_or(u64::MAX).to_le_bytes());
        let (max, topic) =
            self.dead_letter.as_ref().map_or((u32::MAX, ""), |d| (d.max_deliveries, &d.topic));
        out.extend_from_slice(&max.to_le_bytes());
        let len = u32::try_from(topic.len()).expect("invariant: topic names are short");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(topic.as_bytes());
    }

    /// Inverse of `encode`; `None` for bytes it does not write (never panics).
    pub fn decode(r: &mut Reader<'_>) -> Option<QueueSettings> {
        let visibility_timeout_ms = Some(r.u64()?).filter(|&ms| ms != u64::MAX);
        let max = r.u32()?;
        let len = r.u32()? as usize;
        let topic = std::str::from_utf8(r.take(len)?).ok()?.to_string();
        let dead_letter = match (max, topic.is_empty()) {
            (u32::MAX, true) => None,
            (u32::MAX, false) | (_, true) => return None,
            (max_deliveries, false) => Some(DeadLetter { max_deliveries, topic }),
        };
        Some(QueueSettings { visibility_timeout_ms, dead_letter })
    }
}

fn bad(message: &str) -> ClientError {
    ClientError::BadRequest(message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead(max: u32, topic: &str) -> Option<DeadLetter> {
        Some(DeadLetter { max_deliveries: max, topic: topic.to_string() })
    }

    #[test]
    fn a_request_is_validated_and_zero_means_the_default_lease() {
        let ok = QueueSettings::requested(Some(0), None, None).expect("0 is the default");
        assert!(ok.is_default());
        let set = QueueSettings::requested(Some(5_000), Some(3), Some("dlq".into())).expect("ok");
        assert_eq!(set.visibility_ms(30_000), 5_000);
        assert_eq!(set.dead_letter, dead(3, "dlq"));
        for (vis, max, topic) in [
            (Some(99), None, None),
            (Some(MAX_VISIBILITY_TIMEOUT_MS + 1), None, None),
            (None, Some(3), None),
            (None, None, Some("dlq".to_string())),
            (None, Some(0), Some("dlq".to_string())),
            (None, Some(MAX_MAX_DELIVERIES + 1), Some("dlq".to_string())),
            (None, Some(3), Some(String::new())),
            (None, Some(3), Some("bad/name".to_string())),
        ] {
            let refused = QueueSettings::requested(vis, max, topic.clone());
            assert!(
                matches!(refused, Err(ClientError::BadRequest(_))),
                "{vis:?} {max:?} {topic:?}"
            );
        }
    }

    #[test]
    fn settings_round_trip_and_only_their_own_spelling_decodes() {
        for settings in [
            QueueSettings::default(),
            QueueSettings { visibility_timeout_ms: Some(1_000), dead_letter: None },
            QueueSettings { visibility_timeout_ms: None, dead_letter: dead(5, "orders-dlq") },
        ] {
            let mut bytes = Vec::new();
            settings.encode(&mut bytes);
            let mut r = Reader::new(&bytes);
            assert_eq!(QueueSettings::decode(&mut r), Some(settings));
            assert!(r.rest().is_empty());
        }
        // A limit without a topic, and a topic without a limit, are not encodings.
        let mut half = Vec::new();
        QueueSettings::default().encode(&mut half);
        half[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(QueueSettings::decode(&mut Reader::new(&half)), None);
        let mut other = Vec::new();
        QueueSettings { visibility_timeout_ms: None, dead_letter: dead(5, "d") }.encode(&mut other);
        other[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(QueueSettings::decode(&mut Reader::new(&other)), None);
    }
}
