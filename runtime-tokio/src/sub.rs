//! `narad sub TOPIC`: a queue worker on the command line. It leases messages (a consume without
//! an offset), prints each as one JSON line, then acks it (or, with `--nack`, gives it back: a
//! dry run that leaves the queue as it was). Nothing available: each receive long-polls for up
//! to a second (woken by the first message that becomes available), then asks again. Ctrl-C (or SIGTERM) stops it after the message in hand, with a line saying how many
//! were settled.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cli::SubArgs;

/// How long one receive waits on the server for a message (short, so Ctrl-C and `--idle` are
/// honoured within about a second).
const RECEIVE_WAIT: &str = "1s";
/// A client never waits longer than this for one answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `narad sub`.
pub fn run(args: SubArgs) -> anyhow::Result<()> {
    let stop = crate::dev::watch_signals()?;
    let agent = args.target.agent(REQUEST_TIMEOUT)?;
    let base = args.target.base();
    let topic = crate::client::segment(&args.topic);
    let mut receive =
        format!("{base}/v1/topics/{topic}/consume?max={}&wait={RECEIVE_WAIT}", args.max);
    if let Some(partition) = args.partition {
        receive.push_str(&format!("&partition={partition}"));
    }
    let ack = format!("{base}/v1/topics/{topic}/ack{}", if args.nack { "?extend=0" } else { "" });
    let (mut settled, mut idle_since) = (0u64, Instant::now());
    while !stop.load(Ordering::Relaxed) && args.count.is_none_or(|n| settled < n) {
        let messages = lease(&agent, &receive)?;
        if messages.is_empty() {
            if args.idle.is_some_and(|idle| idle_since.elapsed() >= idle) {
                break;
            }
            continue;
        }
        idle_since = Instant::now();
        for message in messages {
            println!("{message}");
            let handle =
                message["receipt_handle"].as_str().context("a message without a receipt_handle")?;
            settle(&agent, &ack, handle)?;
            settled += 1;
        }
    }
    let what = if args.nack { "nacked (given back)" } else { "acked" };
    eprintln!("{settled} messages {what}");
    Ok(())
}

/// One receive: the messages leased (empty: nothing available).
fn lease(agent: &ureq::Agent, url: &str) -> anyhow::Result<Vec<Value>> {
    let response = agent.get(url).call().with_context(|| format!("requesting {url}"))?;
    let status = response.status().as_u16();
    let body = response.into_body().read_to_vec().context("reading the answer")?;
    match status {
        204 => Ok(Vec::new()),
        200 => {
            let answer: Value = serde_json::from_slice(&body).context("the answer is not JSON")?;
            Ok(answer["messages"].as_array().cloned().unwrap_or_default())
        }
        _ => bail!("receive answered {status}: {}", String::from_utf8_lossy(&body).trim()),
    }
}

/// Acks (or nacks) one handle; 410 (the lease expired meanwhile) is reported, not fatal.
fn settle(agent: &ureq::Agent, url: &str, handle: &str) -> anyhow::Result<()> {
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}receipt_handle={handle}");
    let response = agent
        .post(&url)
        .header("content-type", "application/json")
        .send(&[][..])
        .with_context(|| format!("requesting {url}"))?;
    match response.status().as_u16() {
        204 => Ok(()),
        410 => {
            eprintln!("lease {handle} had expired: the message will be delivered again");
            Ok(())
        }
        status => {
            let body = response.into_body().read_to_vec().unwrap_or_default();
            bail!("ack answered {status}: {}", String::from_utf8_lossy(&body).trim())
        }
    }
}
