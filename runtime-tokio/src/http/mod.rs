//! The HTTP API (docs/design.md §2, the README's table) on axum. Handlers translate HTTP into
//! `ClientOp`s, ask the node through its `NodeHandle`, and translate the `ClientReply` back: status
//! codes come from `ClientError::http_status`, errors are `{"error": "..."}`. Validation that needs
//! the topic catalogue lives in the core; this layer only rejects what it cannot even decode.

pub(crate) mod body;
mod cluster;
mod consume;
mod error;
mod metrics;
pub(crate) mod produce;
pub(crate) mod query;
mod queue;
mod topics;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use narad_core::{ClientOp, ClientReply};

use crate::driver::NodeHandle;
pub use error::ApiError;

/// Every route of the v1 API plus the health, readiness and metrics endpoints.
pub fn router(node: NodeHandle) -> Router {
    Router::new()
        .route("/v1/topics", post(topics::create).get(topics::list))
        .route("/v1/topics/{topic}", get(topics::get).patch(topics::update).delete(topics::delete))
        .route("/v1/topics/{topic}/produce", post(produce::single))
        .route("/v1/topics/{topic}/produce/batch", post(produce::batch))
        .route("/v1/topics/{topic}/consume", get(consume::consume))
        .route("/v1/topics/{topic}/ack", post(queue::ack))
        .route("/v1/cluster/members", get(cluster::members))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(node)
}

/// Sends `op` to the node; an error reply becomes an `ApiError` with its status.
async fn call(node: &NodeHandle, op: ClientOp) -> Result<ClientReply, ApiError> {
    match node.request(op).await {
        Ok(ClientReply::Error(error)) => Err(ApiError::from(error)),
        Ok(reply) => Ok(reply),
        Err(_gone) => Err(ApiError::node_stopped()),
    }
}

/// Liveness: the process is up and serving HTTP.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: recovery is finished, the metastore knows a leader and this node's replica has
/// caught up, and the cluster lists this node as a live member.
async fn readyz(State(node): State<NodeHandle>) -> Response {
    if node.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: recovering, or not yet caught up with the cluster's metastore",
        )
        .into_response()
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
}

/// A response with a JSON body already serialised into `body`.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let content_type = HeaderValue::from_static("application/json");
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}
