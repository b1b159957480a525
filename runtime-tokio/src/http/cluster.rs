//! `GET /v1/cluster/members`: the cluster's members as this node's metastore replica sees them
//! (a node without a quorum still answers, with what it last knew).

use axum::http::StatusCode;
use axum::response::Response;
use narad_core::api::MemberView;
use narad_core::{ClientOp, ClientReply};
use serde::Serialize;

use super::{ApiError, Caller, json_response};

/// One member as the API shows it.
#[derive(Serialize)]
struct MemberJson<'a> {
    id: u32,
    /// `alive` or `dead` (the metastore leader marks a member dead after its heartbeats stop).
    status: &'static str,
    /// Metastore role: `leader`, `follower` or `unknown`.
    role: &'a str,
    http_addr: &'a str,
    cluster_addr: &'a str,
    partitions_owned: u32,
    /// The member's own wall clock (ms since the Unix epoch) at its last applied heartbeat;
    /// informational (liveness is judged on the leader's clock).
    last_heartbeat_ms: u64,
}

impl<'a> From<&'a MemberView> for MemberJson<'a> {
    fn from(m: &'a MemberView) -> MemberJson<'a> {
        MemberJson {
            id: m.id,
            status: if m.alive { "alive" } else { "dead" },
            role: &m.role,
            http_addr: &m.http_addr,
            cluster_addr: &m.cluster_addr,
            partitions_owned: m.partitions_owned,
            last_heartbeat_ms: m.last_heartbeat_ms,
        }
    }
}

/// `GET /v1/cluster/members` → 200 `{"members": [...]}`, sorted by id.
pub async fn members(node: Caller) -> Result<Response, ApiError> {
    match node.call(ClientOp::Members).await? {
        ClientReply::Members(members) => {
            let members: Vec<MemberJson<'_>> = members.iter().map(MemberJson::from).collect();
            let body = serde_json::to_vec(&serde_json::json!({ "members": members }))
                .expect("invariant: member JSON serialises");
            Ok(json_response(StatusCode::OK, body))
        }
        other => Err(ApiError::unexpected(&other)),
    }
}
