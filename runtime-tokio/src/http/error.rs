//! The API's error answer: a status code and `{"error": "<what went wrong>"}` (a 410 to a consume
//! below a partition's log start adds `"log_start_offset"`).
//!
//! Every 401 carries the Basic challenge (`WWW-Authenticate: Basic realm="narad"`), whoever
//! refused: the HTTP layer (no or wrong credentials) or the node (a user deleted meanwhile).
//!
//! An overloaded node (a bound of its internal queues reached, `ClientError::Overloaded`) answers
//! 503 with `Retry-After: 1`, not 429: the limit is the node's, not the client's (429 says "you
//! send too much"), and 503 is what clients already retry for every other transient refusal.
//! A produce past its principal's quota (`ClientError::QuotaExceeded`) is the client's: 429,
//! with the `Retry-After` the quota computed.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use narad_core::{ClientError, ClientReply};

/// An HTTP error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: Cow<'static, str>,
    /// Seconds for a `Retry-After` header (overload answers).
    retry_after: Option<u32>,
    /// The partition's first offset (410 answers to a consume below it).
    log_start_offset: Option<u64>,
}

/// The `Retry-After` of an overload answer, in seconds.
const OVERLOAD_RETRY_AFTER_SECS: u32 = 1;

impl ApiError {
    /// An error with `status` and a human-readable `message`.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError { status, message: message.into(), retry_after: None, log_start_offset: None }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 413 Payload Too Large.
    pub fn too_large(message: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    /// 503: the node task has stopped (shutdown finished) and will not answer.
    pub fn node_stopped() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }

    /// 500: the node stopped after it was handed the request and before it answered. The
    /// request may have taken effect (a produce may be durable and be committed after a
    /// restart), so this is no clean refusal: retry, and expect a duplicate.
    pub fn node_died() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the node stopped before it answered: the request may or may not have taken effect",
        )
    }

    /// 500 for a reply of the wrong kind: a contract violation between runtime and core.
    pub fn unexpected(reply: &ClientReply) -> ApiError {
        tracing::error!(?reply, "core answered with a reply of the wrong kind");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error: unexpected reply")
    }

    /// This error with a `Retry-After` of `secs` seconds.
    pub fn with_retry_after(mut self, secs: u32) -> ApiError {
        self.retry_after = Some(secs);
        self
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> ApiError {
        let status = StatusCode::from_u16(error.http_status())
            .expect("invariant: http_status returns a valid status code");
        let retry_after = match &error {
            ClientError::Overloaded(_) => Some(OVERLOAD_RETRY_AFTER_SECS),
            ClientError::QuotaExceeded { retry_after_us, .. } => {
                let secs = narad_core::quota::retry_after_secs(*retry_after_us);
                Some(u32::try_from(secs).unwrap_or(u32::MAX))
            }
            _ => None,
        };
        let log_start_offset = match error {
            ClientError::Gone { log_start_offset } => Some(log_start_offset),
            _ => None,
        };
        ApiError { retry_after, log_start_offset, ..ApiError::new(status, error.to_string()) }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match self.log_start_offset {
            Some(start) => serde_json::json!({ "error": self.message, "log_start_offset": start }),
            None => serde_json::json!({ "error": self.message }),
        }
        .to_string();
        let content_type = HeaderValue::from_static("application/json");
        let mut response =
            (self.status, [(header::CONTENT_TYPE, content_type)], body).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = HeaderValue::from_static(r#"Basic realm="narad", charset="UTF-8""#);
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_below_the_log_start_answers_410_with_the_offset_to_read_from() {
        let response = ApiError::from(ClientError::Gone { log_start_offset: 42 }).into_response();
        assert_eq!(response.status(), StatusCode::GONE);
        let body = json_body(response);
        assert_eq!(body["log_start_offset"], 42);
        assert!(body["error"].as_str().is_some_and(|e| e.contains("log start offset 42")));
    }

    fn json_body(response: Response) -> serde_json::Value {
        let bytes = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
            .expect("body");
        serde_json::from_slice(&bytes).expect("JSON body")
    }

    #[test]
    fn a_spent_quota_answers_429_with_its_retry_after() {
        let error =
            ClientError::QuotaExceeded { message: "spent".into(), retry_after_us: 6_000_001 };
        let response = ApiError::from(error).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(json_body(response)["error"], "spent");
    }

    #[test]
    fn an_overloaded_node_answers_503_with_retry_after() {
        let response = ApiError::from(ClientError::Overloaded("full".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let other = ApiError::from(ClientError::Unavailable("no leader".into())).into_response();
        assert!(other.headers().get(header::RETRY_AFTER).is_none());
    }
}
