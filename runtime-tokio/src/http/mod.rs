//! The HTTP API (docs/design.md §2, the README's table) on axum. Handlers translate HTTP into
//! `ClientOp`s, ask the node through its `NodeHandle`, and translate the `ClientReply` back: status
//! codes come from `ClientError::http_status`, errors are `{"error": "..."}`. Validation that needs
//! the topic catalogue lives in the core; this layer only rejects what it cannot even decode.

mod access;
pub(crate) mod body;
mod cluster;
mod consume;
mod error;
mod json;
mod metrics;
pub(crate) mod produce;
pub(crate) mod query;
mod queue;
mod topics;
mod users;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};

use crate::auth::SharedGate;
use crate::driver::NodeHandle;
pub use access::Caller;
pub use error::ApiError;

/// Every route of the v1 API plus the health, readiness and metrics endpoints, behind the door
/// that gives each request its principal (`access`).
pub fn router(node: NodeHandle, gate: SharedGate) -> Router {
    let door = access::Door(std::sync::Arc::new((node.clone(), gate)));
    Router::new()
        .route("/v1/topics", post(topics::create).get(topics::list))
        .route("/v1/topics/{topic}", get(topics::get).patch(topics::update).delete(topics::delete))
        .route("/v1/topics/{topic}/produce", post(produce::single))
        .route("/v1/topics/{topic}/produce/batch", post(produce::batch))
        .route("/v1/topics/{topic}/consume", get(consume::consume))
        .route("/v1/topics/{topic}/ack", post(queue::ack))
        .route("/v1/cluster/members", get(cluster::members))
        .route("/v1/users", post(users::create).get(users::list))
        .route("/v1/users/{user}", get(users::get).delete(users::delete))
        .route("/v1/users/{user}/grants", put(users::set_grants))
        .route("/v1/users/{user}/password", put(users::set_password))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(door, access::door))
        .with_state(node)
}

/// Liveness: the process is up and serving HTTP, `{"status": "ok"}`; 503 `{"status": "shutting
/// down"}` once its graceful shutdown began (the v1 shapes). The benchmarks' HTTP ceiling, so it
/// allocates nothing.
async fn healthz(State(node): State<NodeHandle>) -> Response {
    if node.is_stopping() {
        static_json(StatusCode::SERVICE_UNAVAILABLE, br#"{"status":"shutting down"}"#)
    } else {
        static_json(StatusCode::OK, br#"{"status":"ok"}"#)
    }
}

/// Readiness: recovery is finished, the metastore knows a leader and this node's replica has
/// caught up, and the cluster lists this node as a live member. 200 `{"status": "ready"}`, else
/// 503 with the reason in `error` (the v1 shapes).
async fn readyz(State(node): State<NodeHandle>) -> Response {
    if node.is_ready() {
        static_json(StatusCode::OK, br#"{"status":"ready"}"#)
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

/// A response with a constant JSON body.
fn static_json(status: StatusCode, body: &'static [u8]) -> Response {
    let content_type = HeaderValue::from_static("application/json");
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A response with a JSON body already serialised into `body`.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let content_type = HeaderValue::from_static("application/json");
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::Path;
    use axum::http::{HeaderMap, Uri};

    async fn body_of(response: Response) -> (StatusCode, Option<String>, serde_json::Value) {
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("ASCII content type").to_string());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, content_type, serde_json::from_slice(&bytes).expect("a JSON body"))
    }

    /// Issue 12: the probes answer JSON, `{"status": ...}` or the error, as the v1 API does.
    #[tokio::test]
    async fn probes_answer_json() {
        let json = Some("application/json".to_string());
        let health = healthz(State(NodeHandle::detached(true, false))).await;
        let (status, content_type, body) = body_of(health).await;
        assert_eq!((status, &content_type), (StatusCode::OK, &json));
        assert_eq!(body, serde_json::json!({ "status": "ok" }));
        let stopping = healthz(State(NodeHandle::detached(true, true))).await;
        let (status, content_type, body) = body_of(stopping).await;
        assert_eq!((status, &content_type), (StatusCode::SERVICE_UNAVAILABLE, &json));
        assert_eq!(body, serde_json::json!({ "status": "shutting down" }));
        let ready = readyz(State(NodeHandle::detached(true, false))).await;
        let (status, content_type, body) = body_of(ready).await;
        assert_eq!((status, &content_type), (StatusCode::OK, &json));
        assert_eq!(body, serde_json::json!({ "status": "ready" }));
        let unready = readyz(State(NodeHandle::detached(false, false))).await;
        let (status, content_type, body) = body_of(unready).await;
        assert_eq!((status, &content_type), (StatusCode::SERVICE_UNAVAILABLE, &json));
        assert!(body["error"].as_str().is_some_and(|e| e.starts_with("not ready")), "{body}");
    }

    /// Issue 12: a JSON array is not a body, and a batch takes no `key` or `partition` in its
    /// query. Both are refused before the node is asked (a detached node would answer 503).
    #[tokio::test]
    async fn refused_before_the_node_is_asked() {
        let node = || Caller::trusted(NodeHandle::detached(true, false));
        let headers = HeaderMap::new;
        let create = topics::create(node(), headers(), Body::from(r#"["t",3,null]"#)).await;
        assert_eq!(create.expect_err("array body").status(), StatusCode::BAD_REQUEST);
        let path = || Path("t".to_string());
        let update = topics::update(node(), path(), headers(), Body::from("[1000]")).await;
        assert_eq!(update.expect_err("array body").status(), StatusCode::BAD_REQUEST);
        let batch = r#"{"messages":[{"payload":"a"}]}"#;
        for query in ["key=k", "partition=0"] {
            let uri: Uri = format!("/v1/topics/t/produce/batch?{query}").parse().expect("uri");
            let answer = produce::batch(node(), path(), uri, headers(), Body::from(batch)).await;
            let error = answer.expect_err("query key or partition");
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            let name = query.split('=').next().expect("name");
            assert!(format!("{error:?}").contains(&format!("`{name}`")), "{error:?}");
        }
        let uri: Uri = "/v1/topics/t/produce/batch?wait=1".parse().expect("uri");
        let answer = produce::batch(node(), path(), uri, headers(), Body::from(batch)).await;
        let error = answer.expect_err("no node behind the handle");
        assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE, "{error:?}");
    }

    /// Found by the second simulation tier: a produce handed to a node whose driver then
    /// stopped may be durable (and committed after a restart), so its answer is 500
    /// (ambiguous: retry), never the 503 of a clean refusal.
    #[tokio::test]
    async fn a_request_the_node_took_and_never_answered_is_ambiguous() {
        let uri: Uri = "/v1/topics/t/produce".parse().expect("uri");
        let path = Path("t".to_string());
        let state = Caller::trusted(NodeHandle::dying());
        let answer = produce::single(state, path, uri, HeaderMap::new(), Body::from("x")).await;
        let error = answer.expect_err("the node never answered");
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR, "{error:?}");
        assert!(format!("{error:?}").contains("may or may not have taken effect"), "{error:?}");
    }
}
