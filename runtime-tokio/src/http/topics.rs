//! Topic routes: create, list (a page at a time), get (with partition statistics), update
//! (retention), delete. Not on the hot path, so plain serde structs do the JSON. The shapes follow
//! the original v1 API where it defines a field: `created_at` in Unix seconds (`created_at_ms`
//! beside it) and `owner_node` as a string.

use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use narad_core::api::{PartitionStats, QueueSettings, TopicInfo};
use narad_core::{ClientOp, ClientReply, TopicChange};
use serde::{Deserialize, Deserializer, Serialize};

use super::body::read_limited;
use super::json::object;
use super::query::{topic_list_params, topic_params};
use super::{ApiError, Caller, json_response};

/// Largest create-topic body we read (the real content is well under 1 KiB).
const CREATE_BODY_BYTES: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTopic {
    name: String,
    partitions: Option<u32>,
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    /// The lease a queue receive gives (`0` or absent: the default, 30 s).
    visibility_timeout_ms: Option<u64>,
    /// With `dead_letter_topic`: deliveries without an ack before a message is moved there.
    max_deliveries: Option<u32>,
    dead_letter_topic: Option<String>,
}

/// The body of `PATCH /v1/topics/{t}`. Each field distinguishes absent (keep) from `null`:
/// `"retention_bytes": null` removes the size limit; `"retention_ms": null` is refused (there
/// is no "no time limit" other than `0`, which keeps records forever).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateTopic {
    #[serde(default, deserialize_with = "present")]
    retention_ms: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    retention_bytes: Option<Option<u64>>,
}

/// A field that is present in the JSON, as `Some(value or null)` (absent stays `None`).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(deserializer).map(Some)
}

/// A topic as the API shows it: `retention_ms` is the retention in force (the default for a
/// topic never given one; `0`: forever), `retention_bytes` the per-partition limit or `null`.
#[derive(Serialize)]
struct TopicJson<'a> {
    name: &'a str,
    /// The incarnation, 16 hex digits: a topic deleted and created again gets a new one.
    id: String,
    partitions: u32,
    retention_ms: u64,
    retention_bytes: Option<u64>,
    /// The lease a queue receive gives (the default when the topic set none); the Go client
    /// times its lease renewals by it.
    visibility_timeout_ms: u64,
    /// Present when the topic has a dead-letter topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_deliveries: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_letter_topic: Option<&'a str>,
    /// Unix seconds.
    created_at: u64,
    created_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition_stats: Option<Vec<PartitionJson>>,
    /// `true` when some partition's owner did not report (its numbers are `null`); absent
    /// otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    partial: bool,
}

#[derive(Serialize)]
struct PartitionJson {
    index: u32,
    /// The owner's node id, as a string (the v1 shape: ids are names there).
    owner_node: String,
    /// `ok` when the numbers are the owner's, `owner_unavailable` when they are `null`.
    status: &'static str,
    /// `null` while the owner is down or did not answer in time (zeros for a partition that
    /// never received a record).
    log_start_offset: Option<u64>,
    high_watermark: Option<u64>,
    segments: Option<u64>,
    size_bytes: Option<u64>,
    /// Queue consume (lag): messages available to a receive now, leased, and settled (acked)
    /// from the log start; `null` like the others while the owner is down.
    available: Option<u64>,
    leased: Option<u64>,
    acked: Option<u64>,
    /// The v1 names: `oldest_offset` is `log_start_offset`; `next_offset`, the offset the next
    /// commit starts at, is the high watermark (a commit in flight is not visible yet).
    oldest_offset: Option<u64>,
    next_offset: Option<u64>,
    /// Lag in time: the timestamp of the oldest unacked message (by offset) and its age on
    /// this node's clock; `null` when every message is acked, or while its owner has not read
    /// it yet (at most a retention pass after a restart), or the owner did not report.
    oldest_unacked_timestamp_ms: Option<u64>,
    oldest_unacked_age_ms: Option<u64>,
}

impl<'a> TopicJson<'a> {
    /// A topic as listed (no numbers).
    fn new(info: &'a TopicInfo) -> TopicJson<'a> {
        TopicJson::shown(info, None, 0)
    }

    /// A topic with its partitions' numbers, ages told at `now_ms` (this node's clock).
    fn with_stats(info: &'a TopicInfo, stats: &[PartitionStats], now_ms: u64) -> TopicJson<'a> {
        TopicJson::shown(info, Some(stats), now_ms)
    }

    fn shown(info: &'a TopicInfo, stats: Option<&[PartitionStats]>, now_ms: u64) -> TopicJson<'a> {
        let partition_stats = stats.map(|stats| {
            let json = |p: &PartitionStats| PartitionJson {
                index: p.index,
                owner_node: p.owner_node.to_string(),
                status: if p.numbers.is_some() { "ok" } else { "owner_unavailable" },
                log_start_offset: p.numbers.map(|n| n.log_start_offset),
                high_watermark: p.numbers.map(|n| n.high_watermark),
                segments: p.numbers.map(|n| n.segments),
                size_bytes: p.numbers.map(|n| n.size_bytes),
                available: p.numbers.map(|n| {
                    let held = n.high_watermark - n.log_start_offset;
                    held.saturating_sub(n.queue_settled + n.queue_leased)
                }),
                leased: p.numbers.map(|n| n.queue_leased),
                acked: p.numbers.map(|n| n.queue_settled),
                oldest_offset: p.numbers.map(|n| n.log_start_offset),
                next_offset: p.numbers.map(|n| n.high_watermark),
                oldest_unacked_timestamp_ms: p.numbers.and_then(|n| n.oldest_unsettled_ms),
                oldest_unacked_age_ms: p
                    .numbers
                    .and_then(|n| n.oldest_unsettled_ms)
                    .map(|at| now_ms.saturating_sub(at)),
            };
            stats.iter().map(json).collect()
        });
        let partial = stats.is_some_and(|stats| stats.iter().any(|p| p.numbers.is_none()));
        TopicJson {
            name: &info.name,
            id: format!("{:016x}", info.id.0),
            partitions: info.partitions,
            retention_ms: info.retention_ms_in_force(),
            retention_bytes: info.retention_bytes,
            visibility_timeout_ms: info
                .queue
                .visibility_ms(narad_core::constants::DEFAULT_VISIBILITY_TIMEOUT_MS),
            max_deliveries: info.queue.dead_letter.as_ref().map(|d| d.max_deliveries),
            dead_letter_topic: info.queue.dead_letter.as_ref().map(|d| d.topic.as_str()),
            created_at: info.created_ms / 1000,
            created_at_ms: info.created_ms,
            partition_stats,
            partial,
        }
    }
}

/// `POST /v1/topics` → 201 with the topic.
pub async fn create(node: Caller, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_limited(&headers, body, CREATE_BODY_BYTES).await?;
    let request: CreateTopic = object(&body, "topic body")?;
    let queue = QueueSettings::requested(
        request.visibility_timeout_ms,
        request.max_deliveries,
        request.dead_letter_topic,
    )
    .map_err(ApiError::from)?;
    let op = ClientOp::CreateTopic {
        name: request.name,
        partitions: request.partitions,
        retention_ms: request.retention_ms,
        retention_bytes: request.retention_bytes,
        queue,
    };
    match node.call(op).await? {
        ClientReply::TopicCreated(info) => Ok(to_json(StatusCode::CREATED, &TopicJson::new(&info))),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /v1/topics[?limit=&page_token=]` → 200 `{"topics": [...], "next_page_token": "..."}`:
/// one page in name order, `next_page_token` empty on the last.
pub async fn list(node: Caller, uri: Uri) -> Result<Response, ApiError> {
    let params = topic_list_params(uri.query())?;
    let op = ClientOp::ListTopics { after: params.page_token, limit: params.limit };
    match node.call(op).await? {
        ClientReply::Topics { topics, next } => {
            let topics: Vec<TopicJson<'_>> = topics.iter().map(TopicJson::new).collect();
            let next = next.unwrap_or_default();
            let page = serde_json::json!({ "topics": topics, "next_page_token": next });
            Ok(to_json(StatusCode::OK, &page))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /v1/topics/{t}[?partition=p]` → 200 with `partition_stats` (of partition `p` only).
pub async fn get(node: Caller, Path(name): Path<String>, uri: Uri) -> Result<Response, ApiError> {
    let partition = topic_params(uri.query())?;
    match node.call(ClientOp::GetTopic { name, partition }).await? {
        ClientReply::Topic(info, stats) => {
            let json = TopicJson::with_stats(&info, &stats, node.unix_millis());
            Ok(to_json(StatusCode::OK, &json))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `PATCH /v1/topics/{t}` → 200 with the topic as it is now (without `partition_stats`).
pub async fn update(
    node: Caller,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_limited(&headers, body, CREATE_BODY_BYTES).await?;
    let request: UpdateTopic = object(&body, "topic update body")?;
    let retention_ms = match request.retention_ms {
        Some(None) => {
            let message =
                "retention_ms cannot be null: give milliseconds (0 keeps records forever)";
            return Err(ApiError::bad_request(message.to_string()));
        }
        other => other.flatten(),
    };
    let change = TopicChange { retention_ms, retention_bytes: request.retention_bytes };
    match node.call(ClientOp::UpdateTopic { name, change }).await? {
        ClientReply::TopicUpdated(info) => Ok(to_json(StatusCode::OK, &TopicJson::new(&info))),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `DELETE /v1/topics/{t}` → 204.
pub async fn delete(node: Caller, Path(name): Path<String>) -> Result<Response, ApiError> {
    match node.call(ClientOp::DeleteTopic { name }).await? {
        ClientReply::TopicDeleted => Ok(StatusCode::NO_CONTENT.into_response()),
        other => Err(ApiError::unexpected(&other)),
    }
}

fn to_json(status: StatusCode, value: &impl Serialize) -> Response {
    let body = serde_json::to_vec(value).expect("invariant: API types serialise to JSON");
    json_response(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_core::api::PartitionNumbers;
    use narad_core::ids::TopicId;

    /// Issue 12: the shape the original v1 clients decode: `owner_node` a string, `created_at`
    /// Unix seconds (with `created_at_ms` beside it), `retention_ms` the integer in force.
    #[test]
    fn a_topic_in_the_v1_shape() {
        let info = TopicInfo {
            name: "orders".into(),
            id: TopicId(7),
            partitions: 2,
            retention_ms: None,
            retention_bytes: None,
            created_ms: 1_700_000_000_999,
            queue: Default::default(),
        };
        let numbers = PartitionNumbers {
            log_start_offset: 1,
            high_watermark: 5,
            segments: 1,
            size_bytes: 9,
            oldest_unsettled_ms: Some(1_700_000_000_000),
            ..PartitionNumbers::default()
        };
        let stats = [
            PartitionStats { index: 0, owner_node: 3, numbers: Some(numbers) },
            PartitionStats { index: 1, owner_node: 12, numbers: None },
        ];
        let now_ms = 1_700_000_004_500;
        let json =
            serde_json::to_value(TopicJson::with_stats(&info, &stats, now_ms)).expect("JSON");
        assert_eq!(json["created_at"], 1_700_000_000);
        assert_eq!(json["created_at_ms"], 1_700_000_000_999_u64);
        assert_eq!(json["retention_ms"], narad_core::constants::DEFAULT_RETENTION_MS);
        assert_eq!(json["partition_stats"][0]["owner_node"], "3");
        assert_eq!(json["partition_stats"][1]["owner_node"], "12");
        assert_eq!(json["partition_stats"][0]["high_watermark"], 5);
        assert_eq!(json["id"], "0000000000000007");
        assert_eq!(json["visibility_timeout_ms"], 30_000);
        // The v1 names of the numbers, and which partitions reported them.
        assert_eq!(json["partition_stats"][0]["oldest_offset"], 1);
        assert_eq!(json["partition_stats"][0]["next_offset"], 5);
        assert_eq!(json["partition_stats"][0]["status"], "ok");
        assert_eq!(json["partition_stats"][1]["status"], "owner_unavailable");
        assert!(json["partition_stats"][1]["oldest_offset"].is_null());
        assert_eq!(json["partial"], true);
        // Lag in time, on the answering node's clock.
        assert_eq!(
            json["partition_stats"][0]["oldest_unacked_timestamp_ms"],
            1_700_000_000_000_u64
        );
        assert_eq!(json["partition_stats"][0]["oldest_unacked_age_ms"], 4_500);
        assert!(json["partition_stats"][1]["oldest_unacked_age_ms"].is_null());
        let listed = serde_json::to_value(TopicJson::new(&info)).expect("JSON");
        assert!(listed.get("partition_stats").is_none());
        assert!(listed.get("partial").is_none(), "absent unless a partition did not report");
        assert_eq!(listed["retention_ms"], narad_core::constants::DEFAULT_RETENTION_MS);
    }
}
