//! `/v1/users` (docs/design.md §8): create, list, read, delete users and replace their grants
//! or password. A password is hashed here (the KDF is the runtime's) and never leaves as
//! anything but its hash inside the metastore; answers never hold either. Only an admin (or a
//! user changing its own password) gets as far as the KDF: the copy of the users the door holds
//! says who is one, and the node checks the grant again before anything changes.

use axum::Extension;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use narad_core::access::{Action, Grant, Principal, TopicPattern, UserInfo};
use narad_core::{ClientOp, ClientReply};
use serde::{Deserialize, Serialize};

use super::body::read_limited;
use super::json::object;
use super::{ApiError, Caller, json_response};
use crate::auth::SharedGate;

/// Largest body of a user request (a password of 1 KiB and 64 grants fit).
const USER_BODY_BYTES: usize = 64 * 1024;

/// One grant as the API writes it: an action and one pattern (`topics`), or the original
/// Narad's form, a list of patterns (`patterns`, one grant each). `admin` with neither is `*`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantJson {
    action: String,
    topics: Option<String>,
    patterns: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateUser {
    name: String,
    password: String,
    #[serde(default)]
    grants: Vec<GrantJson>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetGrants {
    grants: Vec<GrantJson>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPassword {
    password: String,
}

#[derive(Serialize)]
struct GrantOut {
    action: &'static str,
    topics: String,
}

/// A user as answers show it (never a hash).
#[derive(Serialize)]
struct UserJson<'a> {
    name: &'a str,
    grants: Vec<GrantOut>,
    created_at_ms: u64,
    updated_at_ms: u64,
}

impl<'a> UserJson<'a> {
    fn new(user: &'a UserInfo) -> UserJson<'a> {
        let grants = user
            .grants
            .iter()
            .map(|g| GrantOut { action: g.action.name(), topics: g.topics.to_string() })
            .collect();
        UserJson {
            name: &user.name,
            grants,
            created_at_ms: user.created_ms,
            updated_at_ms: user.updated_ms,
        }
    }
}

/// `POST /v1/users` → 201 with the user.
pub async fn create(
    node: Caller,
    Extension(gate): Extension<SharedGate>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_limited(&headers, body, USER_BODY_BYTES).await?;
    let request: CreateUser = object(&body, "user body")?;
    let grants = grants_of(request.grants)?;
    may_administer(&node, None)?;
    let hash = gate.hash_password(request.password).await?;
    let op = ClientOp::CreateUser { name: request.name, hash, grants };
    match node.call(op).await? {
        ClientReply::UserCreated(user) => Ok(user_response(StatusCode::CREATED, &user)),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /v1/users` → 200 `{"users": [...]}`.
pub async fn list(node: Caller) -> Result<Response, ApiError> {
    match node.call(ClientOp::ListUsers).await? {
        ClientReply::Users(users) => {
            let users: Vec<UserJson<'_>> = users.iter().map(UserJson::new).collect();
            Ok(to_json(StatusCode::OK, &serde_json::json!({ "users": users })))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `GET /v1/users/{u}` → 200 with the user.
pub async fn get(node: Caller, Path(name): Path<String>) -> Result<Response, ApiError> {
    match node.call(ClientOp::GetUser { name }).await? {
        ClientReply::User(user) => Ok(user_response(StatusCode::OK, &user)),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `DELETE /v1/users/{u}` → 204.
pub async fn delete(node: Caller, Path(name): Path<String>) -> Result<Response, ApiError> {
    match node.call(ClientOp::DeleteUser { name }).await? {
        ClientReply::UserDeleted => Ok(StatusCode::NO_CONTENT.into_response()),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// `PUT /v1/users/{u}/grants` → 200 with the user.
pub async fn set_grants(
    node: Caller,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_limited(&headers, body, USER_BODY_BYTES).await?;
    let request: SetGrants = object(&body, "grants body")?;
    let grants = grants_of(request.grants)?;
    changed(node.call(ClientOp::SetGrants { name, grants }).await?)
}

/// `PUT /v1/users/{u}/password` → 200 with the user (an admin, or the user itself).
pub async fn set_password(
    node: Caller,
    Extension(gate): Extension<SharedGate>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_limited(&headers, body, USER_BODY_BYTES).await?;
    let request: SetPassword = object(&body, "password body")?;
    may_administer(&node, Some(&name))?;
    let hash = gate.hash_password(request.password).await?;
    changed(node.call(ClientOp::SetPassword { name, hash }).await?)
}

fn changed(reply: ClientReply) -> Result<Response, ApiError> {
    match reply {
        ClientReply::UserChanged(user) => Ok(user_response(StatusCode::OK, &user)),
        other => Err(ApiError::unexpected(&other)),
    }
}

/// Refuses (403) before the KDF runs a caller the door's copy of the users says is no admin
/// (and, for `own`, not that user). The node checks again.
fn may_administer(node: &Caller, own: Option<&str>) -> Result<(), ApiError> {
    let Principal::User { name, .. } = node.who() else { return Ok(()) };
    let users = node.node().users();
    if own == Some(name.as_str()) || users.get(name).is_some_and(|c| c.admin) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!("user `{name}` holds no `admin` grant on `*`"),
    ))
}

/// The grants a request lists, checked (400 for an unknown action or a bad pattern).
fn grants_of(listed: Vec<GrantJson>) -> Result<Vec<Grant>, ApiError> {
    let mut grants = Vec::new();
    for grant in listed {
        let action = Action::parse(&grant.action).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown action {:?}: use produce, consume, create or admin",
                grant.action
            ))
        })?;
        let patterns = match (grant.topics, grant.patterns) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request("a grant has `topics` or `patterns`, not both"));
            }
            (Some(one), None) => vec![one],
            (None, Some(many)) if !many.is_empty() => many,
            (None, _) if action == Action::Admin => vec!["*".to_string()],
            (None, _) => {
                return Err(ApiError::bad_request(format!(
                    "a `{}` grant needs `topics` (a name, a prefix ending in `*`, or `*`)",
                    action.name()
                )));
            }
        };
        for pattern in patterns {
            let topics = TopicPattern::parse(&pattern).map_err(ApiError::bad_request)?;
            grants.push(Grant { action, topics });
        }
    }
    Ok(grants)
}

fn user_response(status: StatusCode, user: &UserInfo) -> Response {
    to_json(status, &UserJson::new(user))
}

fn to_json(status: StatusCode, value: &impl Serialize) -> Response {
    json_response(status, serde_json::to_vec(value).expect("invariant: JSON serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(action: &str, topics: Option<&str>, patterns: Option<&[&str]>) -> GrantJson {
        GrantJson {
            action: action.into(),
            topics: topics.map(Into::into),
            patterns: patterns.map(|p| p.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn grants_take_one_pattern_or_the_original_list_and_admin_defaults_to_everything() {
        let grants = grants_of(vec![
            grant("produce", Some("orders.*"), None),
            grant("consume", None, Some(&["a", "b*"])),
            grant("admin", None, None),
        ])
        .expect("valid");
        let shown: Vec<String> =
            grants.iter().map(|g| format!("{}:{}", g.action.name(), g.topics)).collect();
        assert_eq!(shown, ["produce:orders.*", "consume:a", "consume:b*", "admin:*"]);
    }

    #[test]
    fn bad_grants_are_400() {
        for bad in [
            grant("fly", Some("x"), None),
            grant("produce", None, None),
            grant("produce", Some("x"), Some(&["y"])),
            grant("produce", Some("a*b"), None),
        ] {
            let error = grants_of(vec![bad]).expect_err("refused");
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{error:?}");
        }
    }
}
