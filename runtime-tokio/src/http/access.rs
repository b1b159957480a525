//! The door every request passes before its handler (docs/design.md §8): the probes go through
//! untouched; everything else gets a `Principal` from its credentials (`auth::Gate`), or its 401,
//! 429 or 503. While credentials are required, a request that changes something must also say it
//! comes from a program, not from a web page riding on a browser's remembered Basic credentials:
//! a JSON or octet-stream body, or an `X-Narad-Client` header (a page cannot send either across
//! origins without the browser asking the node first, and the node never says yes). Handlers take
//! a `Caller`: the node and the principal, which every request to the node carries.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use narad_core::access::Principal;
use narad_core::quota::Payer;
use narad_core::{ClientError, ClientOp, ClientReply};

use super::ApiError;
use crate::auth::SharedGate;
use crate::driver::{NodeGone, NodeHandle};
use crate::quota_gate::Probe;

/// The header a program may send instead of a JSON or octet-stream content type.
pub const CLIENT_HEADER: &str = "x-narad-client";

/// What the door needs (cloned for every request: one reference count).
#[derive(Clone)]
pub struct Door(pub std::sync::Arc<(NodeHandle, SharedGate)>);

/// The middleware: a principal for the request, or its refusal.
pub async fn door(State(door): State<Door>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(request).await;
    }
    let (node, gate) = &*door.0;
    if path.starts_with("/v1/users") {
        // The user routes hash passwords with the gate's KDF settings and slots.
        request.extensions_mut().insert(gate.clone());
    }
    let path = request.uri().path();
    let users = node.users();
    let open = path == "/metrics" && gate.settings().metrics_unauthenticated;
    let who = if open {
        Principal::Trusted
    } else {
        if gate.requires_credentials(&users)
            && let Err(refusal) = from_a_program(&request)
        {
            return refuse(request, refusal).await;
        }
        let authorization = request.headers().get(header::AUTHORIZATION);
        match gate.principal(&users, authorization).await {
            Ok(who) => who,
            Err(refusal) => return refuse(request, refusal).await,
        }
    };
    request.extensions_mut().insert(who);
    next.run(request).await
}

/// A body this small is read (and dropped) before a refusal goes out, so the client's
/// keep-alive connection stays usable; a larger one is left, and the connection closes.
const DRAIN_REFUSED_BODY_BYTES: usize = 64 * 1024;

/// Answers `request` with `refusal`, having read a small body first (an unread body costs the
/// connection: a client refused many times, a producer with an expired password say, would
/// otherwise reconnect for every answer).
async fn refuse(request: Request, refusal: ApiError) -> Response {
    let (parts, body) = request.into_parts();
    drain_small_body(&parts.headers, body).await;
    refusal.into_response()
}

/// Reads and drops the body of a refused request if it declared at most
/// `DRAIN_REFUSED_BODY_BYTES`.
pub async fn drain_small_body(headers: &axum::http::HeaderMap, body: axum::body::Body) {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len <= DRAIN_REFUSED_BODY_BYTES) {
        let _ = axum::body::to_bytes(body, DRAIN_REFUSED_BODY_BYTES).await;
    }
}

/// The browser guard: a request that changes something says it comes from a program.
fn from_a_program(request: &Request) -> Result<(), ApiError> {
    let changes = matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH)
        || request.method() == Method::DELETE;
    if !changes || request.headers().contains_key(CLIENT_HEADER) {
        return Ok(());
    }
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let essence =
        content_type.map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some("application/json" | "application/octet-stream") => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "with access control on, a request that changes something needs Content-Type: \
             application/json or application/octet-stream, or an X-Narad-Client header",
        )),
    }
}

/// The node and who is asking: what every handler that asks the node takes.
pub struct Caller {
    node: NodeHandle,
    who: Principal,
}

impl Caller {
    /// A caller with access control off (for tests of the handlers alone).
    #[cfg(test)]
    pub fn trusted(node: NodeHandle) -> Caller {
        Caller { node, who: Principal::Trusted }
    }

    /// Sends `op` to the node; an error reply becomes an `ApiError` with its status.
    pub async fn call(&self, op: ClientOp) -> Result<ClientReply, ApiError> {
        match self.node.request(op, self.who.clone()).await {
            Ok(ClientReply::Error(error)) => {
                if let ClientError::QuotaExceeded { retry_after_us, .. } = &error {
                    let (gate, now_us) = (self.node.quota_gate(), self.node.unix_micros());
                    gate.close(Payer::of(&self.who), now_us, *retry_after_us);
                }
                Err(ApiError::from(error))
            }
            Ok(reply) => Ok(reply),
            Err(NodeGone::Stopped) => Err(ApiError::node_stopped()),
            // Not a clean refusal: what was handed over may have taken effect (ambiguous, 500).
            Err(NodeGone::Unanswered) => Err(ApiError::node_died()),
        }
    }

    /// A produce's 429 before its body is read, while the node will not take more of this
    /// caller's produces yet (`quota_gate.rs`); or the probe to hold while the produce runs.
    pub fn quota_gate(&self) -> Result<Option<Probe>, ApiError> {
        let gate = self.node.quota_gate();
        gate.enter(&self.who, self.node.unix_micros()).map_err(|wait_us| {
            ApiError::from(ClientError::QuotaExceeded {
                message: format!(
                    "produce quota spent; retry after {} s",
                    narad_core::quota::retry_after_secs(wait_us)
                ),
                retry_after_us: wait_us,
            })
        })
    }

    pub fn node(&self) -> &NodeHandle {
        &self.node
    }

    pub fn who(&self) -> &Principal {
        &self.who
    }

    /// Milliseconds since the Unix epoch on the node's wall clock.
    pub fn unix_millis(&self) -> u64 {
        self.node.unix_millis()
    }
}

impl FromRequestParts<NodeHandle> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &NodeHandle) -> Result<Caller, ApiError> {
        // Fail closed: a route the door did not run for has no principal, and is refused.
        let who = parts.extensions.get::<Principal>().cloned().ok_or_else(|| {
            tracing::error!(path = %parts.uri.path(), "a request reached its handler without a principal");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error: no principal")
        })?;
        Ok(Caller { node: node.clone(), who })
    }
}
