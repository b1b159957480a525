//! The figures of one bench run, as one JSON object (`--json`) or a short human summary.

use serde_json::{Value, json};

use super::load::{Kind, Run};
use super::probe::ProbeResult;
use super::server::delta;
use super::{Window, visible};
use crate::cli::BenchArgs;

const MIB: f64 = 1024.0 * 1024.0;

/// RSS and backlog sampled during the window: (seconds into the window, value).
#[derive(Default)]
pub struct Samples {
    rss: Vec<(f64, u64)>,
    backlog: Vec<(f64, f64)>,
}

impl Samples {
    pub fn push(&mut self, at: f64, rss: Option<u64>, backlog: Option<f64>) {
        if let Some(rss) = rss {
            self.rss.push((at, rss));
        }
        if let Some(backlog) = backlog {
            self.backlog.push((at, backlog));
        }
    }
}

/// Everything a run reports.
pub struct Report {
    value: Value,
}

impl Report {
    pub fn new(
        args: &BenchArgs,
        run: &Run,
        window: Window,
        samples: Samples,
        server_pid: Option<u32>,
    ) -> Report {
        let tally = run.tally.borrow();
        let seconds = run.measure_until.duration_since(run.measure_from).as_secs_f64();
        let per_request = run.shape.messages_per_request();
        let acked = tally.requests * per_request;
        let mut value = json!({
            "kind": kind_name(run.shape.kind),
            "url": args.target.url,
            "topic": (run.shape.kind != Kind::Healthz).then_some(&args.topic),
            "concurrency": args.concurrency,
            "payload_bytes": args.payload,
            "batch": per_request,
            "duration_s": round(seconds, 3),
            "acked": acked,
            "requests": tally.requests,
            "errors": tally.errors,
            "first_error": tally.first_error,
            "msgs_per_sec": round(acked as f64 / seconds, 1),
            "requests_per_sec": round(tally.requests as f64 / seconds, 1),
            "p50_ms": round(tally.latency.quantile_ms(0.50), 3),
            "p90_ms": round(tally.latency.quantile_ms(0.90), 3),
            "p99_ms": round(tally.latency.quantile_ms(0.99), 3),
            "p999_ms": round(tally.latency.quantile_ms(0.999), 3),
            "max_ms": round(tally.latency.max_ms(), 3),
            "server_pid": server_pid,
        });
        let fields = value.as_object_mut().expect("invariant: built as an object");
        server_fields(fields, &window, acked as f64);
        if run.shape.kind == Kind::Queue {
            let d = |name| delta(&window.before, &window.after, name);
            let acks = d("narad_queue_acks_total");
            let per_ack =
                (acks > 0.0).then(|| round(d("narad_consumer_journal_syncs_total") / acks, 4));
            fields.insert("journal_syncs_per_ack".into(), json!(per_ack));
            fields.insert("server_acks".into(), json!(acks));
            fields.insert("empty_receives".into(), json!(tally.empty));
        }
        sample_fields(fields, &samples);
        if let Some(v) = &run.visible {
            let result = v.measure(run.measure_from, run.measure_until);
            visible_fields(fields, &result, v);
        }
        Report { value }
    }

    /// Prints the JSON object, or a human summary.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", self.value);
            return;
        }
        let v = &self.value;
        println!(
            "{} x{} ({} B, batch {}): {} msg/s, p50 {} ms, p99 {} ms, p99.9 {} ms, errors {}",
            v["kind"],
            v["concurrency"],
            v["payload_bytes"],
            v["batch"],
            v["msgs_per_sec"],
            v["p50_ms"],
            v["p99_ms"],
            v["p999_ms"],
            v["errors"]
        );
        println!(
            "  fsyncs/msg {}  records/group commit {}  server cpu {} %  client cpu {} %  \
             rss max {} MiB",
            v["fsyncs_per_msg"],
            v["records_per_group_commit"],
            v["server_cpu_pct"],
            v["client_cpu_pct"],
            v["rss_max_mib"]
        );
        if v.get("visible_p50_ms").is_some() {
            println!(
                "  visible p50 {} ms  p99 {} ms  missing {}  backlog max {} (end {})",
                v["visible_p50_ms"],
                v["visible_p99_ms"],
                v["visible_missing"],
                v["backlog_max"],
                v["backlog_end"]
            );
        }
        if !v["first_error"].is_null() {
            println!("  first error: {}", v["first_error"]);
        }
    }
}

fn server_fields(fields: &mut serde_json::Map<String, Value>, window: &Window, acked: f64) {
    let d = |name| delta(&window.before, &window.after, name);
    let records = d("narad_records_accepted_total");
    let commits = d("narad_wal_group_commits_total");
    let per_record = |x: f64| (records > 0.0).then(|| round(x / records, 4));
    fields.insert("server_records_accepted".into(), json!(records));
    fields.insert("fsyncs_per_msg".into(), json!(per_record(d("narad_wal_fsyncs_total"))));
    fields.insert(
        "partition_fsyncs_per_msg".into(),
        json!(per_record(d("narad_partition_fsyncs_total"))),
    );
    fields.insert("wal_group_commits".into(), json!(commits));
    let per_commit =
        (commits > 0.0).then(|| round(d("narad_wal_records_synced_total") / commits, 1));
    fields.insert("records_per_group_commit".into(), json!(per_commit));
    let pct = |cpu: Option<f64>| cpu.map(|c| round(100.0 * c / window.seconds, 1));
    fields.insert("server_cpu_pct".into(), json!(pct(window.server_cpu_seconds)));
    fields.insert("client_cpu_pct".into(), json!(pct(window.client_cpu_seconds)));
    let per_msg =
        window.server_cpu_seconds.filter(|_| acked > 0.0).map(|c| round(c * 1e6 / acked, 2));
    fields.insert("server_cpu_us_per_msg".into(), json!(per_msg));
}

fn sample_fields(fields: &mut serde_json::Map<String, Value>, samples: &Samples) {
    let rss_max = samples.rss.iter().map(|s| s.1).max();
    let rss_end = samples.rss.last().map(|s| s.1);
    let mib = |b: Option<u64>| b.map(|b| round(b as f64 / MIB, 1));
    fields.insert("rss_max_mib".into(), json!(mib(rss_max)));
    fields.insert("rss_end_mib".into(), json!(mib(rss_end)));
    if samples.backlog.is_empty() {
        return;
    }
    let end = samples.backlog.last().map_or(0.0, |s| s.0);
    let max_where = |keep: &dyn Fn(f64) -> bool| {
        samples.backlog.iter().filter(|s| keep(s.0)).map(|s| s.1).fold(0.0, f64::max)
    };
    fields.insert("backlog_max".into(), json!(max_where(&|_| true)));
    fields.insert("backlog_max_first_half".into(), json!(max_where(&|t| t <= end / 2.0)));
    fields.insert("backlog_max_second_half".into(), json!(max_where(&|t| t > end / 2.0)));
    fields.insert("backlog_end".into(), json!(samples.backlog.last().map(|s| s.1)));
}

fn visible_fields(
    fields: &mut serde_json::Map<String, Value>,
    result: &visible::VisibleResult,
    v: &visible::Visible,
) {
    fields.insert("visible_p50_ms".into(), json!(round(result.latency.quantile_ms(0.5), 3)));
    fields.insert("visible_p99_ms".into(), json!(round(result.latency.quantile_ms(0.99), 3)));
    fields.insert("visible_max_ms".into(), json!(round(result.latency.max_ms(), 3)));
    fields.insert("visible_samples".into(), json!(result.latency.len()));
    fields.insert("visible_missing".into(), json!(result.missing));
    fields.insert("visible_errors".into(), json!(v.errors.get()));
    fields.insert("visible_first_error".into(), json!(*v.first_error.borrow()));
}

/// Prints the fsync probe's result.
pub fn print_probe(result: &ProbeResult, overwrite: bool, as_json: bool) {
    let mode = if overwrite { "overwrite" } else { "append" };
    let value = json!({
        "kind": "fsync_probe",
        "mode": mode,
        "write_bytes": 256,
        "ops_per_sec": round(result.ops_per_sec, 1),
        "p50_ms": round(result.latency.quantile_ms(0.5), 3),
        "p99_ms": round(result.latency.quantile_ms(0.99), 3),
    });
    if as_json {
        println!("{value}");
    } else {
        println!(
            "serialized write(256 B, {mode}) + fdatasync: {} ops/s, p50 {} ms, p99 {} ms",
            value["ops_per_sec"], value["p50_ms"], value["p99_ms"]
        );
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Produce => "produce",
        Kind::Batch(_) => "batch",
        Kind::Healthz => "healthz",
        Kind::Queue => "queue",
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}
