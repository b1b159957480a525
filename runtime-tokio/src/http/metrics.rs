//! `GET /metrics`: the node's `Stats` in the Prometheus text exposition format. Names are
//! `narad_*`, counters end in `_total`; per-partition gauges carry `topic` and `partition` labels.

use std::fmt::Write;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use narad_core::Stats;
use narad_core::api::PartitionNumbers;

use super::ApiError;
use crate::driver::NodeHandle;

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the node's counters.
pub async fn metrics(State(node): State<NodeHandle>) -> Result<Response, ApiError> {
    let stats = node.stats().await.map_err(|_| ApiError::node_stopped())?;
    let mut body = render(&stats, node.unix_millis());
    if let Some(dir) = node.data_dir() {
        render_free_space(&mut body, dir);
    }
    if let Some(transport) = node.transport_stats() {
        crate::transport::write_metrics(&mut body, &transport);
    }
    render_quota_gate(&mut body, node.quota_gate().refusals());
    let content_type = HeaderValue::from_static(CONTENT_TYPE);
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Renders every metric (ages told at `now_ms`, this node's clock).
pub fn render(stats: &Stats, now_ms: u64) -> String {
    let mut out = String::with_capacity(4096 + stats.partitions.len() * 160);
    for metric in &SCALARS {
        let (name, help, kind) = (metric.name, metric.help, metric.kind.as_str());
        let value = (metric.value)(stats);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    render_partitions(&mut out, stats);
    render_oldest_unacked(&mut out, stats, now_ms);
    out
}

/// Prometheus metric types we export.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One node-wide metric and where its value comes from.
struct Scalar {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: fn(&Stats) -> u64,
}

/// Every node-wide metric, in exposition order.
const SCALARS: [Scalar; 41] = [
    Scalar {
        name: "narad_produce_requests_accepted_total",
        kind: Kind::Counter,
        help: "Produce requests answered 202.",
        value: |s| s.produce_requests_accepted,
    },
    Scalar {
        name: "narad_produce_requests_rejected_total",
        kind: Kind::Counter,
        help: "Produce requests answered with an error.",
        value: |s| s.produce_requests_rejected,
    },
    Scalar {
        name: "narad_requests_refused_access_total",
        kind: Kind::Counter,
        help: "Requests refused by the grant check (401 for a deleted user, 403).",
        value: |s| s.requests_refused_access,
    },
    Scalar {
        name: "narad_produce_requests_throttled_total",
        kind: Kind::Counter,
        help: "Produce requests answered 429: their principal's produce quota was spent.",
        value: |s| s.produce_requests_throttled,
    },
    Scalar {
        name: "narad_records_accepted_total",
        kind: Kind::Counter,
        help: "Records acknowledged (each message of a batch counts).",
        value: |s| s.records_accepted,
    },
    Scalar {
        name: "narad_wal_group_commits_total",
        kind: Kind::Counter,
        help: "Ingress WAL group commits (one write and one fsync each).",
        value: |s| s.wal_group_commits,
    },
    Scalar {
        name: "narad_wal_fsyncs_total",
        kind: Kind::Counter,
        help: "fsyncs issued on the ingress WAL (segments and checkpoint).",
        value: |s| s.wal_fsyncs,
    },
    Scalar {
        name: "narad_wal_records_synced_total",
        kind: Kind::Counter,
        help: "Records written by WAL group commits (per group commit: divide by narad_wal_group_commits_total).",
        value: |s| s.wal_records_synced,
    },
    Scalar {
        name: "narad_wal_bytes_written_total",
        kind: Kind::Counter,
        help: "Bytes written to the ingress WAL.",
        value: |s| s.wal_bytes_written,
    },
    Scalar {
        name: "narad_wal_failed",
        kind: Kind::Gauge,
        help: "1 once the WAL latched after a write or fsync failure (until restart).",
        value: |s| s.wal_failed,
    },
    Scalar {
        name: "narad_wal_segments",
        kind: Kind::Gauge,
        help: "Ingress WAL segments on disk.",
        value: |s| s.wal_segments,
    },
    Scalar {
        name: "narad_wal_bytes_on_disk",
        kind: Kind::Gauge,
        help: "Bytes of ingress WAL segments on disk.",
        value: |s| s.wal_bytes_on_disk,
    },
    Scalar {
        name: "narad_dispatch_backlog",
        kind: Kind::Gauge,
        help: "Records accepted but not yet committed to a partition or discarded.",
        value: |s| s.dispatch_backlog,
    },
    Scalar {
        name: "narad_wal_checkpoint",
        kind: Kind::Gauge,
        help: "Durable WAL checkpoint: first sequence number not yet done.",
        value: |s| s.wal_checkpoint,
    },
    Scalar {
        name: "narad_commits_ok_total",
        kind: Kind::Counter,
        help: "Partition-log commits that succeeded.",
        value: |s| s.commits_ok,
    },
    Scalar {
        name: "narad_commits_failed_total",
        kind: Kind::Counter,
        help: "Partition-log commits that failed and were rolled back.",
        value: |s| s.commits_failed,
    },
    Scalar {
        name: "narad_records_committed_total",
        kind: Kind::Counter,
        help: "Records made visible by partition commits.",
        value: |s| s.records_committed,
    },
    Scalar {
        name: "narad_partition_fsyncs_total",
        kind: Kind::Counter,
        help: "fsyncs issued on partition logs.",
        value: |s| s.partition_fsyncs,
    },
    Scalar {
        name: "narad_records_rerouted_total",
        kind: Kind::Counter,
        help: "Records rerouted to a sibling partition.",
        value: |s| s.records_rerouted,
    },
    Scalar {
        name: "narad_records_discarded_total",
        kind: Kind::Counter,
        help: "Records discarded because their topic was deleted.",
        value: |s| s.records_discarded,
    },
    Scalar {
        name: "narad_ready",
        kind: Kind::Gauge,
        help: "1 once recovery finished and the node serves requests.",
        value: |s| s.ready,
    },
    Scalar {
        name: "narad_records_abandoned_total",
        kind: Kind::Counter,
        help: "Records of unacknowledged bulk produces dropped at start-up: their last chunk never reached the WAL.",
        value: |s| s.records_abandoned,
    },
    Scalar {
        name: "narad_records_lost_total",
        kind: Kind::Counter,
        help: "Acknowledged records found damaged in the WAL before dispatch (their only copy): lost.",
        value: |s| s.records_lost,
    },
    Scalar {
        name: "narad_remote_commits_ok_total",
        kind: Kind::Counter,
        help: "Commits sent to other nodes and acknowledged.",
        value: |s| s.remote_commits_ok,
    },
    Scalar {
        name: "narad_remote_commits_failed_total",
        kind: Kind::Counter,
        help: "Commits sent to other nodes that failed or timed out.",
        value: |s| s.remote_commits_failed,
    },
    Scalar {
        name: "narad_peer_messages_refused_total",
        kind: Kind::Counter,
        help: "Peer messages the node could not decode (refused).",
        value: |s| s.peer_messages_refused,
    },
    Scalar {
        name: "narad_meta_leader",
        kind: Kind::Gauge,
        help: "1 while this node is the metastore leader.",
        value: |s| s.meta_leader,
    },
    Scalar {
        name: "narad_meta_messages_dropped_total",
        kind: Kind::Counter,
        help: "Metastore peer messages dropped: undecodable, or not for this node.",
        value: |s| s.meta_messages_dropped,
    },
    Scalar {
        name: "narad_meta_step_errors_total",
        kind: Kind::Counter,
        help: "Metastore messages raft refused to step.",
        value: |s| s.meta_step_errors,
    },
    Scalar {
        name: "narad_meta_undecodable_entries_total",
        kind: Kind::Counter,
        help: "Committed metastore entries that did not decode as a command (applied as no-ops).",
        value: |s| s.meta_undecodable_entries,
    },
    Scalar {
        name: "narad_retention_segments_deleted_total",
        kind: Kind::Counter,
        help: "Sealed partition segments deleted by retention.",
        value: |s| s.retention_segments_deleted,
    },
    Scalar {
        name: "narad_retention_records_deleted_total",
        kind: Kind::Counter,
        help: "Records in the segments retention deleted.",
        value: |s| s.retention_records_deleted,
    },
    Scalar {
        name: "narad_retention_bytes_deleted_total",
        kind: Kind::Counter,
        help: "Bytes of the segments retention deleted.",
        value: |s| s.retention_bytes_deleted,
    },
    Scalar {
        name: "narad_meta_snapshots_taken_total",
        kind: Kind::Counter,
        help: "Metastore snapshots taken locally.",
        value: |s| s.meta_snapshots_taken,
    },
    Scalar {
        name: "narad_meta_snapshots_installed_total",
        kind: Kind::Counter,
        help: "Metastore snapshots installed from the leader.",
        value: |s| s.meta_snapshots_installed,
    },
    Scalar {
        name: "narad_partition_read_damaged_total",
        kind: Kind::Counter,
        help: "Partition reads that found a damaged record at rest (answered 500, nothing served; the error log names the file and byte).",
        value: |s| s.partition_read_damaged,
    },
    Scalar {
        name: "narad_queue_deliveries_total",
        kind: Kind::Counter,
        help: "Queue receives' deliveries (a redelivery counts again).",
        value: |s| s.queue_deliveries,
    },
    Scalar {
        name: "narad_queue_acks_total",
        kind: Kind::Counter,
        help: "Queue acks made durable (answered 204).",
        value: |s| s.queue_acks,
    },
    Scalar {
        name: "narad_queue_dead_lettered_total",
        kind: Kind::Counter,
        help: "Messages moved to their topic's dead-letter topic after max_deliveries deliveries.",
        value: |s| s.queue_dead_lettered,
    },
    Scalar {
        name: "narad_consumer_journal_syncs_total",
        kind: Kind::Counter,
        help: "Syncs of the consumer journal (group commits of acks and delivery counts, images).",
        value: |s| s.consumer_journal_syncs,
    },
    Scalar {
        name: "narad_consumes_parked",
        kind: Kind::Gauge,
        help: "Long-poll consumes parked on this node, waiting for a record or their deadline.",
        value: |s| s.consumes_parked,
    },
];

fn render_partitions(out: &mut String, stats: &Stats) {
    type Value = fn(&PartitionNumbers) -> u64;
    let families: [(&str, &str, Value); 7] = [
        (
            "narad_partition_high_watermark",
            "Records visible on the partition (next offset).",
            |n| n.high_watermark,
        ),
        (
            "narad_partition_log_start_offset",
            "First offset the partition still holds (below it retention deleted).",
            |n| n.log_start_offset,
        ),
        ("narad_partition_segments", "Segment files of the partition log.", |n| n.segments),
        ("narad_partition_size_bytes", "Bytes of the partition log, every segment.", |n| {
            n.size_bytes
        }),
        (
            "narad_queue_available",
            "Messages a queue receive may lease now (not settled, not leased).",
            |n| {
                (n.high_watermark - n.log_start_offset)
                    .saturating_sub(n.queue_settled + n.queue_leased)
            },
        ),
        ("narad_queue_leased", "Messages leased to queue consumers now.", |n| n.queue_leased),
        ("narad_queue_acked", "Messages settled by queue consumers, from the log start.", |n| {
            n.queue_settled
        }),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (topic, partition, numbers) in &stats.partitions {
            let topic = escape_label(topic);
            let value = value(numbers);
            let _ = writeln!(out, "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {value}");
        }
    }
}

/// The age of each partition's oldest unacked message: 0 when every message is acked, left
/// out while its owner has not read it yet (after a restart, until the next retention pass).
fn render_oldest_unacked(out: &mut String, stats: &Stats, now_ms: u64) {
    let name = "narad_queue_oldest_unacked_age_seconds";
    let help = "Age of the partition's oldest unacked message (by offset), on this node's clock.";
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (topic, partition, n) in &stats.partitions {
        let unacked = n.high_watermark - n.log_start_offset > n.queue_settled;
        let age_ms = match n.oldest_unsettled_ms {
            Some(at) => now_ms.saturating_sub(at),
            None if !unacked => 0,
            None => continue,
        };
        let topic = escape_label(topic);
        let seconds = age_ms as f64 / 1_000.0;
        let _ = writeln!(out, "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {seconds}");
    }
}

/// The data directory's filesystem: bytes free for this process and in all. Left out when
/// `statvfs` fails (the gauge would lie).
fn render_free_space(out: &mut String, dir: &std::path::Path) {
    let Ok(fs) = rustix::fs::statvfs(dir) else { return };
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    let total = fs.f_blocks.saturating_mul(fs.f_frsize);
    for (name, help, value) in [
        (
            "narad_data_dir_free_bytes",
            "Bytes free for the node on the data directory's filesystem.",
            free,
        ),
        ("narad_data_dir_size_bytes", "Size of the data directory's filesystem.", total),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    }
}

/// Produces the HTTP layer answered 429 before reading them (`quota_gate.rs`); the node's own
/// 429s are `narad_produce_requests_throttled_total`.
fn render_quota_gate(out: &mut String, refused: u64) {
    let name = "narad_produce_requests_throttled_early_total";
    let help = "Produce requests answered 429 before their body was read: their principal's \
                produce quota was spent a moment before.";
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {refused}");
}

/// Escapes a label value (`\`, `"` and newlines), as the exposition format requires.
fn escape_label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_partition_gauges() {
        let stats = Stats {
            wal_fsyncs: 3,
            dispatch_backlog: 9,
            records_lost: 2,
            partitions: vec![
                (
                    "orders".to_string(),
                    1,
                    PartitionNumbers {
                        log_start_offset: 7,
                        high_watermark: 42,
                        segments: 3,
                        size_bytes: 4096,
                        queue_settled: 30,
                        queue_leased: 2,
                        oldest_unsettled_ms: Some(1_700_000_000_000),
                    },
                ),
                ("idle".to_string(), 0, PartitionNumbers::default()),
                (
                    "unread".to_string(),
                    0,
                    PartitionNumbers { high_watermark: 3, ..PartitionNumbers::default() },
                ),
            ],
            retention_segments_deleted: 5,
            partition_read_damaged: 6,
            ..Stats::default()
        };
        let text = render(&stats, 1_700_000_002_250);
        assert!(text.contains("\nnarad_wal_fsyncs_total 3\n"), "{text}");
        let age = "narad_queue_oldest_unacked_age_seconds";
        assert!(
            text.contains(&format!("{age}{{topic=\"orders\",partition=\"1\"}} 2.25\n")),
            "{text}"
        );
        assert!(text.contains(&format!("{age}{{topic=\"idle\",partition=\"0\"}} 0\n")), "{text}");
        assert!(!text.contains(&format!("{age}{{topic=\"unread\"")), "unknown ages are left out");
        assert!(
            text.contains("# TYPE narad_records_lost_total counter\nnarad_records_lost_total 2\n")
        );
        assert!(text.contains("# TYPE narad_dispatch_backlog gauge\nnarad_dispatch_backlog 9\n"));
        assert!(text.contains("\nnarad_partition_read_damaged_total 6\n"), "{text}");
        assert!(
            text.contains("narad_partition_high_watermark{topic=\"orders\",partition=\"1\"} 42\n")
        );
        assert!(
            text.contains("narad_partition_size_bytes{topic=\"orders\",partition=\"1\"} 4096\n")
        );
        assert!(
            text.contains("narad_partition_log_start_offset{topic=\"orders\",partition=\"1\"} 7\n")
        );
        assert!(text.contains("narad_partition_segments{topic=\"orders\",partition=\"1\"} 3\n"));
        assert!(text.contains("narad_queue_available{topic=\"orders\",partition=\"1\"} 3\n"));
        assert!(text.contains("narad_queue_leased{topic=\"orders\",partition=\"1\"} 2\n"));
        assert!(text.contains("\nnarad_retention_segments_deleted_total 5\n"), "{text}");
        assert_eq!(escape_label("a\"b"), "a\\\"b");
    }

    #[test]
    fn renders_the_free_space_of_a_directory() {
        let mut text = String::new();
        render_free_space(&mut text, std::path::Path::new("/"));
        let free = text.lines().find_map(|l| l.strip_prefix("narad_data_dir_free_bytes "));
        let size = text.lines().find_map(|l| l.strip_prefix("narad_data_dir_size_bytes "));
        let (free, size): (u64, u64) =
            (free.unwrap().parse().unwrap(), size.unwrap().parse().unwrap());
        assert!(size > 0 && free <= size, "{text}");
        let mut missing = String::new();
        render_free_space(&mut missing, std::path::Path::new("/no/such/dir"));
        assert!(missing.is_empty(), "no gauge when statvfs fails");
    }

    #[test]
    fn renders_metastore_counters() {
        let stats = Stats {
            meta_leader: 1,
            meta_messages_dropped: 4,
            meta_step_errors: 5,
            meta_undecodable_entries: 6,
            meta_snapshots_taken: 7,
            meta_snapshots_installed: 8,
            ..Stats::default()
        };
        let text = render(&stats, 0);
        for line in [
            "# TYPE narad_meta_leader gauge\nnarad_meta_leader 1\n",
            "# TYPE narad_meta_messages_dropped_total counter\nnarad_meta_messages_dropped_total 4\n",
            "\nnarad_meta_step_errors_total 5\n",
            "\nnarad_meta_undecodable_entries_total 6\n",
            "\nnarad_meta_snapshots_taken_total 7\n",
            "\nnarad_meta_snapshots_installed_total 8\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn every_metric_name_is_unique() {
        let mut names: Vec<&str> = SCALARS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a metric name appears twice");
    }
}
