//! The client commands (`topic`, `produce`, `consume`): one blocking HTTP request each against
//! a running node (a topic list: one per page). The server's JSON is printed as it came (a
//! topic list: every page's topics in one object); any non-2xx answer becomes an error (message
//! on stderr, exit code 1).

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use narad_core::constants::TOPIC_PAGE_MAX;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::cli::{ConsumeArgs, ProduceArgs, TopicAction, TopicArgs};

/// A client never waits longer than this for one answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest answer we read (a consume of many large messages in base64 stays well below).
pub(crate) const RESPONSE_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// `narad topic ...`.
pub fn topic(args: TopicArgs) -> anyhow::Result<()> {
    let base = args.target.base();
    let agent = args.target.agent(REQUEST_TIMEOUT)?;
    let response = match args.action {
        TopicAction::Create { name, partitions, retention_ms, retention_bytes } => {
            let body = serde_json::json!({
                "name": name,
                "partitions": partitions,
                "retention_ms": retention_ms,
                "retention_bytes": retention_bytes,
            });
            agent
                .post(format!("{base}/v1/topics"))
                .header("content-type", "application/json")
                .send(body.to_string())
        }
        TopicAction::Update { name, retention_ms, retention_bytes, no_retention_bytes } => {
            let body = update_body(retention_ms, retention_bytes, no_retention_bytes);
            agent
                .patch(format!("{base}/v1/topics/{}", segment(&name)))
                .header("content-type", "application/json")
                .send(body.to_string())
        }
        TopicAction::List => return list_all_topics(&agent, base),
        TopicAction::Get { name, partition } => {
            let mut url = format!("{base}/v1/topics/{}", segment(&name));
            if let Some(partition) = partition {
                url.push_str(&format!("?partition={partition}"));
            }
            agent.get(url).call()
        }
        TopicAction::Delete { name } => {
            agent.delete(format!("{base}/v1/topics/{}", segment(&name))).call()
        }
    };
    print_answer(response.with_context(|| format!("requesting {base}"))?)
}

/// `narad topic list`: every page of `GET /v1/topics`, printed as one `{"topics": [...]}`.
fn list_all_topics(agent: &ureq::Agent, base: &str) -> anyhow::Result<()> {
    let mut topics = Vec::new();
    let mut token = String::new();
    loop {
        let url = format!("{base}/v1/topics?limit={TOPIC_PAGE_MAX}&page_token={}", segment(&token));
        let response = agent.get(url).call().with_context(|| format!("requesting {base}"))?;
        let page: serde_json::Value =
            serde_json::from_slice(&answer_body(response)?).context("reading a topic page")?;
        let listed =
            page.get("topics").and_then(|t| t.as_array()).context("a page without topics")?;
        topics.extend(listed.iter().cloned());
        match page.get("next_page_token").and_then(|t| t.as_str()) {
            Some(next) if !next.is_empty() && next > token.as_str() => token = next.to_string(),
            _ => break,
        }
    }
    println!("{}", serde_json::json!({ "topics": topics }));
    Ok(())
}

/// The `PATCH` body of `narad topic update`: only the settings given (`null` removes the size
/// limit).
fn update_body(
    retention_ms: Option<u64>,
    retention_bytes: Option<u64>,
    no_retention_bytes: bool,
) -> serde_json::Value {
    let mut body = serde_json::Map::new();
    if let Some(ms) = retention_ms {
        body.insert("retention_ms".into(), ms.into());
    }
    if let Some(bytes) = retention_bytes {
        body.insert("retention_bytes".into(), bytes.into());
    }
    if no_retention_bytes {
        body.insert("retention_bytes".into(), serde_json::Value::Null);
    }
    serde_json::Value::Object(body)
}

/// `narad produce TOPIC [DATA]`.
pub fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let base = args.target.base();
    let data = match args.data {
        Some(data) => data.into_bytes(),
        None => {
            let mut data = Vec::new();
            std::io::stdin().read_to_end(&mut data).context("reading the message from stdin")?;
            data
        }
    };
    let mut url = format!("{base}/v1/topics/{}/produce", segment(&args.topic));
    let mut sep = '?';
    if let Some(key) = &args.key {
        url.push_str(&format!("{sep}key={}", utf8_percent_encode(key, NON_ALPHANUMERIC)));
        sep = '&';
    }
    if let Some(partition) = args.partition {
        url.push_str(&format!("{sep}partition={partition}"));
    }
    let response = args
        .target
        .agent(REQUEST_TIMEOUT)?
        .post(&url)
        .header("content-type", "application/octet-stream")
        .send(&data[..])
        .with_context(|| format!("requesting {base}"))?;
    print_answer(response)
}

/// `narad consume TOPIC --partition P` (and `--follow`: `follow.rs`).
pub fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    if args.follow {
        return crate::follow::follow(&args);
    }
    let Some(partition) = args.partition else {
        bail!("--partition is required (or --follow to follow every partition)");
    };
    let base = args.target.base();
    let mut url = format!(
        "{base}/v1/topics/{}/consume?partition={partition}&offset={}",
        segment(&args.topic),
        args.offset
    );
    if let Some(max) = args.max {
        url.push_str(&format!("&max={max}"));
    }
    let agent = args.target.agent(REQUEST_TIMEOUT)?;
    let response = agent.get(&url).call().with_context(|| format!("requesting {base}"))?;
    if response.status().as_u16() == 204 {
        eprintln!("no message at offset {} (past the high watermark)", args.offset);
        return Ok(());
    }
    print_answer(response)
}

/// A client of `target` with the client commands' timeout.
pub(crate) fn agent(target: &crate::cli::Target) -> anyhow::Result<ureq::Agent> {
    target.agent(REQUEST_TIMEOUT)
}

/// Prints a 2xx body to stdout; anything else is an error carrying the server's message.
pub(crate) fn print_answer(response: ureq::http::Response<ureq::Body>) -> anyhow::Result<()> {
    let body = answer_body(response)?;
    if !body.is_empty() {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&body)?;
        stdout.write_all(b"\n")?;
    }
    Ok(())
}

/// A 2xx answer's body; any other answer is an error naming its status and message.
fn answer_body(response: ureq::http::Response<ureq::Body>) -> anyhow::Result<Vec<u8>> {
    let status = response.status();
    let body = response
        .into_body()
        .with_config()
        .limit(RESPONSE_LIMIT_BYTES)
        .read_to_vec()
        .context("reading the answer")?;
    if !status.is_success() {
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        bail!("{status}: {message}");
    }
    Ok(body)
}

/// Percent-encodes a path segment.
pub(crate) fn segment(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}
