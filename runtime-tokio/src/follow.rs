//! `narad consume TOPIC --follow`: a long-poll replay that prints records as they become
//! visible, one JSON object per line, until Ctrl-C (or SIGTERM), then says on stderr how many
//! it printed. With `--partition P` it follows that partition from `--offset` (default 0: the
//! whole partition, then what arrives); without it, every partition of the topic from its high
//! watermark when the command starts (only new records, like `tail -f`). One thread per
//! partition, each looping on `GET …/consume?partition=p&offset=o&max=100&wait=20s`; a
//! transient error (5xx, connection refused) is retried after a second.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cli::ConsumeArgs;

/// The wait each long-poll asks for: the server's clamp (20 s).
const FOLLOW_WAIT: &str = "20s";
/// Records asked per poll.
const FOLLOW_MAX: u32 = 100;
/// Pause after a failed poll before the next.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Runs until a signal; prints the closing line and exits the process.
pub fn follow(args: &ConsumeArgs) -> anyhow::Result<()> {
    let base = args.target.base().to_string();
    let agent = crate::client::agent(&args.target)?;
    let starts = match args.partition {
        Some(partition) => vec![(partition, args.offset)],
        None => partition_ends(&agent, &base, &args.topic)?,
    };
    let printed = Arc::new(AtomicU64::new(0));
    let stop = crate::dev::watch_signals().context("watching for Ctrl-C")?;
    for (partition, offset) in starts {
        let (base, topic, printed) = (base.clone(), args.topic.clone(), Arc::clone(&printed));
        let agent = agent.clone();
        std::thread::Builder::new()
            .name(format!("follow-p{partition}"))
            .spawn(move || follow_partition(&agent, &base, &topic, partition, offset, &printed))
            .context("starting a follower thread")?;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Holding stdout: no record is half printed when we leave.
    let mut stdout = std::io::stdout().lock();
    stdout.flush()?;
    let count = printed.load(Ordering::Relaxed);
    eprintln!("stopped following `{}`: {count} records printed", args.topic);
    std::process::exit(0);
}

/// Every partition of `topic` and its high watermark now.
fn partition_ends(agent: &ureq::Agent, base: &str, topic: &str) -> anyhow::Result<Vec<(u32, u64)>> {
    let url = format!("{base}/v1/topics/{}", crate::client::segment(topic));
    let response = agent.get(&url).call().with_context(|| format!("requesting {base}"))?;
    let status = response.status();
    let body = read_json(response).context("reading the topic")?;
    if !status.is_success() {
        let message = body.get("error").and_then(|e| e.as_str()).unwrap_or("");
        bail!("{status}: {message}");
    }
    let stats = body.get("partition_stats").and_then(|s| s.as_array()).cloned().unwrap_or_default();
    stats
        .iter()
        .map(|p| {
            let index = p.get("index").and_then(serde_json::Value::as_u64);
            let end = p.get("high_watermark").and_then(serde_json::Value::as_u64);
            match (index, end) {
                (Some(index), Some(end)) => Ok((u32::try_from(index)?, end)),
                (Some(index), None) => bail!("partition {index}'s owner did not answer; retry"),
                _ => bail!("unexpected topic answer: {p}"),
            }
        })
        .collect()
}

fn follow_partition(
    agent: &ureq::Agent,
    base: &str,
    topic: &str,
    partition: u32,
    mut offset: u64,
    printed: &AtomicU64,
) {
    let path = crate::client::segment(topic);
    loop {
        let url = format!(
            "{base}/v1/topics/{path}/consume?partition={partition}&offset={offset}&max={FOLLOW_MAX}&wait={FOLLOW_WAIT}"
        );
        match poll(agent, &url) {
            Ok(records) => {
                let mut stdout = std::io::stdout().lock();
                for record in &records {
                    let _ = writeln!(stdout, "{record}");
                    printed.fetch_add(1, Ordering::Relaxed);
                }
                let _ = stdout.flush();
                offset += records.len() as u64;
            }
            Err(Poll::Gone(start)) => offset = start,
            Err(Poll::Fatal(message)) => {
                eprintln!("partition {partition}: {message}; stopped following it");
                return;
            }
            Err(Poll::Retry(message)) => {
                eprintln!("partition {partition}: {message}; retrying");
                std::thread::sleep(RETRY_AFTER);
            }
        }
    }
}

/// Why a poll brought no records.
enum Poll {
    /// 410: the records are gone; go on from the log start.
    Gone(u64),
    /// A 4xx other than 410: following cannot go on.
    Fatal(String),
    /// A 5xx or a transport error.
    Retry(String),
}

fn poll(agent: &ureq::Agent, url: &str) -> Result<Vec<serde_json::Value>, Poll> {
    let response = agent.get(url).call().map_err(|e| Poll::Retry(e.to_string()))?;
    let status = response.status().as_u16();
    if status == 204 {
        return Ok(Vec::new());
    }
    let body = read_json(response).map_err(|e| Poll::Retry(format!("reading: {e:#}")))?;
    match status {
        200 => Ok(body.get("messages").and_then(|m| m.as_array()).cloned().unwrap_or_default()),
        410 => match body.get("log_start_offset").and_then(serde_json::Value::as_u64) {
            Some(start) => Err(Poll::Gone(start)),
            None => Err(Poll::Fatal(format!("410: {body}"))),
        },
        400..=499 => Err(Poll::Fatal(format!("{status}: {}", error_of(&body)))),
        _ => Err(Poll::Retry(format!("{status}: {}", error_of(&body)))),
    }
}

fn read_json(response: ureq::http::Response<ureq::Body>) -> anyhow::Result<serde_json::Value> {
    let mut body = response.into_body();
    let bytes = body.with_config().limit(crate::client::RESPONSE_LIMIT_BYTES).read_to_vec()?;
    Ok(serde_json::from_slice(&bytes)?)
}

fn error_of(body: &serde_json::Value) -> String {
    body.get("error").and_then(|e| e.as_str()).unwrap_or("").to_string()
}
