//! `GET /metrics`: the node's `Stats` in the Prometheus text exposition format. Names are
//! `narad_*`, counters end in `_total`; per-partition gauges carry `topic` and `partition` labels.

use std::fmt::Write;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use narad_core::Stats;

use super::ApiError;
use crate::driver::NodeHandle;

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the node's counters.
pub async fn metrics(State(node): State<NodeHandle>) -> Result<Response, ApiError> {
    let stats = node.stats().await.map_err(|_| ApiError::node_stopped())?;
    let mut body = render(&stats);
    if let Some(transport) = node.transport_stats() {
        crate::transport::write_metrics(&mut body, &transport);
    }
    let content_type = HeaderValue::from_static(CONTENT_TYPE);
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Renders every metric.
pub fn render(stats: &Stats) -> String {
    let mut out = String::with_capacity(4096 + stats.partitions.len() * 160);
    for metric in &SCALARS {
        let (name, help, kind) = (metric.name, metric.help, metric.kind.as_str());
        let value = (metric.value)(stats);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    render_partitions(&mut out, stats);
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
const SCALARS: [Scalar; 19] = [
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
];

fn render_partitions(out: &mut String, stats: &Stats) {
    let families = [
        ("narad_partition_high_watermark", "Records visible on the partition (next offset)."),
        ("narad_partition_size_bytes", "Bytes of the partition log."),
    ];
    for (family, (name, help)) in families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (topic, partition, high_watermark, size) in &stats.partitions {
            let value = if family == 0 { high_watermark } else { size };
            let topic = escape_label(topic);
            let _ = writeln!(out, "{name}{{topic=\"{topic}\",partition=\"{partition}\"}} {value}");
        }
    }
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
            partitions: vec![("orders".to_string(), 1, 42, 4096)],
            ..Stats::default()
        };
        let text = render(&stats);
        assert!(text.contains("\nnarad_wal_fsyncs_total 3\n"), "{text}");
        assert!(text.contains("# TYPE narad_dispatch_backlog gauge\nnarad_dispatch_backlog 9\n"));
        assert!(
            text.contains("narad_partition_high_watermark{topic=\"orders\",partition=\"1\"} 42\n")
        );
        assert!(
            text.contains("narad_partition_size_bytes{topic=\"orders\",partition=\"1\"} 4096\n")
        );
        assert_eq!(escape_label("a\"b"), "a\\\"b");
    }
}
