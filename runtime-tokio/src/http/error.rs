//! The API's error answer: a status code and `{"error": "<what went wrong>"}`.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use narad_core::{ClientError, ClientReply};

/// An HTTP error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: Cow<'static, str>,
}

impl ApiError {
    /// An error with `status` and a human-readable `message`.
    pub fn new(status: StatusCode, message: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError { status, message: message.into() }
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

    /// 500 for a reply of the wrong kind: a contract violation between runtime and core.
    pub fn unexpected(reply: &ClientReply) -> ApiError {
        tracing::error!(?reply, "core answered with a reply of the wrong kind");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error: unexpected reply")
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
        ApiError::new(status, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let content_type = HeaderValue::from_static("application/json");
        (self.status, [(header::CONTENT_TYPE, content_type)], body).into_response()
    }
}
