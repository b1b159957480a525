//! `narad bench --queue`: closed-loop queue workers. Each worker leases one message (a consume
//! without an offset), acks it with its receipt handle, and counts the pair as one message once
//! the ack is answered 204; a receive that finds nothing (204) is counted as empty and retried
//! after a millisecond. The topic is consumed as it is: fill it first (a produce run).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::load::Run;

/// Pause after a receive found nothing, or after a request failed.
const EMPTY_PAUSE: Duration = Duration::from_millis(1);

/// The receipt handle in a single-message consume answer.
fn receipt_handle(body: &[u8]) -> Option<&str> {
    let key = b"\"receipt_handle\":\"";
    let start = body.windows(key.len()).position(|w| w == key)? + key.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}

/// One closed-loop worker: receive, then ack, until the run is over.
pub async fn worker(run: Rc<Run>) {
    let shape = &run.shape;
    let (headers, topic) = (&shape.endpoint.headers, &shape.topic_segment);
    let receive = format!("GET /v1/topics/{topic}/consume HTTP/1.1\r\n{headers}\r\n");
    let mut conn: Option<Conn> = None;
    while !run.finished() {
        let Some(c) = run.connected(&mut conn).await else { continue };
        run.issued.set(run.issued.get() + 1);
        let sent = Instant::now();
        match cycle(c, &receive, headers, topic).await {
            Ok(Some(())) => run.on_ok(sent, Instant::now()),
            Ok(None) => {
                run.on_empty();
                tokio::time::sleep(EMPTY_PAUSE).await;
            }
            Err(what) => {
                run.on_error(Instant::now(), || what);
                conn = None;
                tokio::time::sleep(EMPTY_PAUSE).await;
            }
        }
    }
}

/// One receive and its ack: `Some` once acked, `None` if there was nothing to receive.
async fn cycle(
    c: &mut Conn,
    receive: &str,
    headers: &str,
    topic: &str,
) -> Result<Option<()>, String> {
    let (status, range) =
        c.round_trip(receive.as_bytes()).await.map_err(|e| format!("receive: {e}"))?;
    match status {
        204 => return Ok(None),
        200 => {}
        other => {
            let body = String::from_utf8_lossy(c.body(range));
            return Err(format!("receive: status {other}: {body}"));
        }
    }
    let handle = receipt_handle(c.body(range))
        .ok_or_else(|| "receive: no receipt_handle in the answer".to_string())?
        .to_string();
    let ack = format!(
        "POST /v1/topics/{topic}/ack?receipt_handle={handle} HTTP/1.1\r\n{headers}\
         Content-Type: application/json\r\nContent-Length: 0\r\n\r\n"
    );
    let (status, range) = c.round_trip(ack.as_bytes()).await.map_err(|e| format!("ack: {e}"))?;
    if status != 204 {
        let body = String::from_utf8_lossy(c.body(range));
        return Err(format!("ack: status {status}: {body}"));
    }
    Ok(Some(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_handle() {
        let body = br#"{"topic":"t","partition":1,"offset":2,"payload":"x","receipt_handle":"1:2:99","delivery_count":1}"#;
        assert_eq!(receipt_handle(body), Some("1:2:99"));
        assert_eq!(receipt_handle(b"{}"), None);
    }
}
