//! The `/v1/users` routes for the tier-2 HTTP client (`http.rs` hands the user ops here): the
//! access client's `ClientOp`s become the v1 requests an operator's client sends, and the
//! answers become the `ClientReply`s the workload and the access checker read. Over HTTP the
//! access client's creates and password changes carry the password where the core's op carries
//! its hash (`workload/access.rs`): the request sends it and the node hashes it. Answers show no
//! incarnation id, so a user read back has id 0 (no incarnation has it; nothing reads it).

use bytes::Bytes;
use hyper::Method;
use narad_core::access::{Action, Grant, TopicPattern, UserId, UserInfo};
use narad_core::{ClientOp, ClientReply};
use serde_json::{Value, json};

use super::http::{HttpRequest, encoded};

/// The v1 request for user op `op` (`None`: not a user op).
pub fn request_of(op: &ClientOp) -> Option<HttpRequest> {
    let request = |method, path: String, body: Option<Value>| HttpRequest {
        method,
        path,
        body: body.map_or_else(Bytes::new, |v| Bytes::from(v.to_string())),
    };
    let user = |name: &str| format!("/v1/users/{}", encoded(name));
    Some(match op {
        ClientOp::CreateUser { name, hash, grants } => {
            let body =
                json!({ "name": name, "password": hash.expose(), "grants": grants_json(grants) });
            request(Method::POST, "/v1/users".to_string(), Some(body))
        }
        ClientOp::SetGrants { name, grants } => {
            let body = json!({ "grants": grants_json(grants) });
            request(Method::PUT, format!("{}/grants", user(name)), Some(body))
        }
        ClientOp::SetPassword { name, hash } => {
            let body = json!({ "password": hash.expose() });
            request(Method::PUT, format!("{}/password", user(name)), Some(body))
        }
        ClientOp::DeleteUser { name } => request(Method::DELETE, user(name), None),
        ClientOp::GetUser { name } => request(Method::GET, user(name), None),
        ClientOp::ListUsers => request(Method::GET, "/v1/users".to_string(), None),
        _ => return None,
    })
}

fn grants_json(grants: &[Grant]) -> Vec<Value> {
    grants
        .iter()
        .map(|g| json!({ "action": g.action.name(), "topics": g.topics.to_string() }))
        .collect()
}

/// The reply a 2xx answer to user op `op` stands for (`None`: undecodable, or not a user op).
pub fn reply_of(op: &ClientOp, body: &[u8]) -> Option<ClientReply> {
    let json = || serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    match op {
        ClientOp::CreateUser { .. } => user_of(&json()).map(ClientReply::UserCreated),
        ClientOp::SetGrants { .. } | ClientOp::SetPassword { .. } => {
            user_of(&json()).map(ClientReply::UserChanged)
        }
        ClientOp::DeleteUser { .. } => Some(ClientReply::UserDeleted),
        ClientOp::GetUser { .. } => user_of(&json()).map(ClientReply::User),
        ClientOp::ListUsers => json()["users"]
            .as_array()
            .and_then(|users| users.iter().map(user_of).collect::<Option<Vec<_>>>())
            .map(ClientReply::Users),
        _ => None,
    }
}

fn user_of(json: &Value) -> Option<UserInfo> {
    let grants = json["grants"]
        .as_array()?
        .iter()
        .map(|g| {
            let action = Action::parse(g["action"].as_str()?)?;
            let topics = TopicPattern::parse(g["topics"].as_str()?).ok()?;
            Some(Grant { action, topics })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(UserInfo {
        name: json["name"].as_str()?.to_string(),
        id: UserId(0),
        grants,
        created_ms: json["created_at_ms"].as_u64()?,
        updated_ms: json["updated_at_ms"].as_u64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use narad_core::access::PasswordHash;

    #[test]
    fn a_create_sends_the_password_and_grants_and_reads_the_user_back() {
        let grants =
            vec![Grant { action: Action::Produce, topics: TopicPattern::parse("t*").expect("p") }];
        let hash = PasswordHash::new("secret-u0-1".into()).expect("non-empty");
        let op = ClientOp::CreateUser { name: "u0".into(), hash, grants: grants.clone() };
        let request = request_of(&op).expect("a user op");
        assert_eq!((request.method, request.path.as_str()), (Method::POST, "/v1/users"));
        let body: Value = serde_json::from_slice(&request.body).expect("json");
        let expected = json!({
            "name": "u0", "password": "secret-u0-1",
            "grants": [{ "action": "produce", "topics": "t*" }],
        });
        assert_eq!(body, expected);
        let answer = br#"{"name":"u0","grants":[{"action":"produce","topics":"t*"}],"created_at_ms":5,"updated_at_ms":6}"#;
        let Some(ClientReply::UserCreated(user)) = reply_of(&op, answer) else { panic!() };
        assert_eq!((user.name.as_str(), user.grants, user.updated_ms), ("u0", grants, 6));
    }

    #[test]
    fn changes_and_deletes_go_to_the_user_path() {
        let name = "a.b@c".to_string();
        let cases = [
            (ClientOp::SetGrants { name: name.clone(), grants: vec![] }, Method::PUT, "/grants"),
            (
                ClientOp::SetPassword {
                    name: name.clone(),
                    hash: PasswordHash::new("x".into()).expect("x"),
                },
                Method::PUT,
                "/password",
            ),
            (ClientOp::DeleteUser { name: name.clone() }, Method::DELETE, ""),
        ];
        for (op, method, tail) in cases {
            let request = request_of(&op).expect("a user op");
            assert_eq!(request.method, method);
            assert_eq!(request.path, format!("/v1/users/a%2Eb%40c{tail}"));
        }
        assert!(request_of(&ClientOp::list_topics()).is_none());
    }
}
