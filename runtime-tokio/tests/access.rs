//! Users, grants and HTTP Basic against the real binary (issue 14): a loopback node with no users
//! serves without credentials; once a user exists every `/v1` route needs them (401 with the
//! Basic challenge), grants decide the rest (403), the browser guard refuses a form post (415),
//! wrong passwords are throttled (429 with `Retry-After`) while a producer whose credentials
//! were verified keeps producing, a changed password takes effect at once; a non-loopback
//! address with no users refuses to start; `--admin-password-file` creates the first admin; and
//! across a 3-node cluster a user created through node 1 produces through node 3 once node 3
//! has applied it, and a deleted user is refused everywhere. A produce quota is per user: one
//! user past it is answered 429 while another produces on.

mod cluster_support;
mod common;

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use cluster_support::TestCluster;
use common::{TestNode, data_dir, wait_until};
use serde_json::{Value, json};

/// Generous: a slow, throttled machine still converges well within it.
const CONVERGE: Duration = Duration::from_secs(30);

/// An HTTP client that may send Basic credentials and says it is a program.
struct AuthClient {
    base: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl AuthClient {
    fn new(base: &str, credentials: Option<(&str, &str)>) -> AuthClient {
        let agent = common::test_agent();
        let authorization = credentials.map(|(name, password)| {
            format!("Basic {}", STANDARD.encode(format!("{name}:{password}")))
        });
        AuthClient { base: base.to_string(), agent, authorization }
    }

    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, Option<String>) {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        if let Some(value) = &self.authorization {
            request = request.header("authorization", value);
        }
        request = request.header("x-narad-client", "test");
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = request.body(body).expect("request");
        match self.agent.run(request) {
            Ok(response) => {
                let status = response.status().as_u16();
                let header = |name| {
                    response.headers().get(name).map(|v| v.to_str().unwrap_or("").to_string())
                };
                let hint = header("www-authenticate").or_else(|| header("retry-after"));
                let text = response.into_body().read_to_string().unwrap_or_default();
                (status, serde_json::from_str(&text).unwrap_or(Value::Null), hint)
            }
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    fn status(&self, method: &str, path: &str, body: Option<&Value>) -> u16 {
        self.send(method, path, body).0
    }

    fn produce(&self, topic: &str) -> u16 {
        self.status("POST", &format!("/v1/topics/{topic}/produce"), Some(&json!("m")))
    }
}

fn create_user(admin: &AuthClient, name: &str, password: &str, grants: Value) {
    let body = json!({ "name": name, "password": password, "grants": grants });
    let (status, answer, _) = admin.send("POST", "/v1/users", Some(&body));
    assert_eq!(status, 201, "create {name}: {answer}");
    assert!(answer.get("password").is_none() && !answer.to_string().contains(password));
}

#[test]
fn credentials_and_grants_decide_what_a_request_may_do() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let open = AuthClient::new(&node.url, None);
    assert_eq!(open.status("GET", "/v1/topics", None), 200, "no users: no credentials needed");
    for topic in ["orders.eu", "payments"] {
        let (status, _, _) = open.send("POST", "/v1/topics", Some(&json!({ "name": topic })));
        assert_eq!(status, 201);
    }
    create_user(&open, "root", "root-password", json!([{ "action": "admin" }]));
    assert!(node.log().contains("serving without credentials until the first user"));

    // From now on every /v1 route needs credentials; the probes do not.
    for (method, path) in [
        ("GET", "/v1/topics"),
        ("POST", "/v1/topics"),
        ("GET", "/v1/topics/orders.eu"),
        ("DELETE", "/v1/topics/orders.eu"),
        ("POST", "/v1/topics/orders.eu/produce"),
        ("GET", "/v1/topics/orders.eu/consume?partition=0"),
        ("POST", "/v1/topics/orders.eu/ack"),
        ("GET", "/v1/cluster/members"),
        ("GET", "/v1/users"),
        ("GET", "/v1/no/such/route"),
        ("GET", "/metrics"),
    ] {
        let (status, _, challenge) = open.send(method, path, None);
        assert_eq!(status, 401, "{method} {path}");
        assert_eq!(challenge.as_deref(), Some(r#"Basic realm="narad", charset="UTF-8""#));
    }
    assert_eq!(open.status("GET", "/healthz", None), 200);
    assert_eq!(open.status("GET", "/readyz", None), 200);

    let root = AuthClient::new(&node.url, Some(("root", "root-password")));
    let grants = json!([{ "action": "produce", "topics": "orders.*" }]);
    create_user(&root, "pro", "pro-password", grants);
    let pro = AuthClient::new(&node.url, Some(("pro", "pro-password")));
    assert_eq!(pro.produce("orders.eu"), 202);
    assert_eq!(pro.produce("payments"), 403);
    assert_eq!(pro.status("POST", "/v1/topics", Some(&json!({ "name": "orders.us" }))), 403);
    assert_eq!(pro.status("DELETE", "/v1/topics/orders.eu", None), 403);
    assert_eq!(pro.status("GET", "/v1/topics/orders.eu/consume?partition=0", None), 403);
    assert_eq!(pro.status("GET", "/v1/users", None), 403);
    let (status, listed, _) = pro.send("GET", "/v1/topics", None);
    assert_eq!((status, listed["topics"].as_array().map(Vec::len)), (200, Some(1)), "{listed}");
    let wrong = AuthClient::new(&node.url, Some(("pro", "not-the-password")));
    assert_eq!(wrong.produce("orders.eu"), 401);
    let nobody = AuthClient::new(&node.url, Some(("nobody", "pro-password")));
    assert_eq!(nobody.produce("orders.eu"), 401);

    // A user changes its own password: the old one stops working at once.
    let change = json!({ "password": "new-pro-password" });
    assert_eq!(pro.status("PUT", "/v1/users/pro/password", Some(&change)), 200);
    assert_eq!(pro.produce("orders.eu"), 401, "the cached old password is worthless");
    let pro = AuthClient::new(&node.url, Some(("pro", "new-pro-password")));
    assert_eq!(pro.produce("orders.eu"), 202);
    assert_eq!(pro.status("PUT", "/v1/users/pro/grants", Some(&json!({ "grants": [] }))), 403);
    assert_eq!(root.status("DELETE", "/v1/users/root", None), 403, "no one deletes themselves");
    let (status, user, _) = root.send("GET", "/v1/users/pro", None);
    assert_eq!((status, user["grants"][0]["topics"].as_str()), (200, Some("orders.*")), "{user}");
}

#[test]
fn a_form_post_is_refused_and_wrong_passwords_are_throttled_not_the_verified_producer() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let open = AuthClient::new(&node.url, None);
    assert_eq!(open.status("POST", "/v1/topics", Some(&json!({ "name": "t" }))), 201);
    create_user(&open, "ann", "ann-password", json!([{ "action": "admin" }]));
    let ann = AuthClient::new(&node.url, Some(("ann", "ann-password")));
    assert_eq!(ann.produce("t"), 202, "verified once, then from the cache");

    // The browser guard: a form post carrying remembered credentials.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let authorization = format!("Basic {}", STANDARD.encode("ann:ann-password"));
    let form = agent
        .post(format!("{}/v1/topics/t/produce", node.url))
        .header("authorization", &authorization)
        .header("content-type", "application/x-www-form-urlencoded")
        .send("a=b")
        .expect("answered");
    assert_eq!(form.status().as_u16(), 415);
    let raw = agent
        .post(format!("{}/v1/topics/t/produce", node.url))
        .header("authorization", &authorization)
        .header("content-type", "application/octet-stream")
        .send("bytes")
        .expect("answered");
    assert_eq!(raw.status().as_u16(), 202, "an octet-stream body is a program's");

    let wrong = AuthClient::new(&node.url, Some(("ann", "wrong-password")));
    for attempt in 0..5 {
        assert_eq!(wrong.produce("t"), 401, "attempt {attempt}");
    }
    let (status, error, retry_after) = wrong.send("POST", "/v1/topics/t/produce", Some(&json!(1)));
    assert_eq!(status, 429, "{error}");
    let secs: u64 = retry_after.expect("Retry-After").parse().expect("seconds");
    assert!((1..=12).contains(&secs), "{secs}");
    assert_eq!(ann.produce("t"), 202, "the verified producer is not throttled");
}

#[test]
fn a_non_loopback_address_with_no_users_refuses_to_start_and_the_admin_file_bootstraps() {
    let (_tmp, dir) = data_dir();
    let output = Command::new(env!("CARGO_BIN_EXE_narad"))
        .args(["serve", "--http", "0.0.0.0:0", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("run narad");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--admin-password-file") && stderr.contains("--insecure-no-auth"),
        "{stderr}"
    );

    let password_file = dir.with_extension("admin-password");
    std::fs::write(&password_file, "bootstrap-password\n").expect("write the password file");
    let file = password_file.to_str().expect("UTF-8 path");
    let node = TestNode::start_with(&dir, &["--admin-password-file", file]);
    let admin = AuthClient::new(&node.url, Some(("admin", "bootstrap-password")));
    let created = wait_until(CONVERGE, || admin.status("GET", "/v1/users", None) == 200);
    assert!(created, "the first admin was created; log:\n{}", node.log());
    let open = AuthClient::new(&node.url, None);
    assert_eq!(open.status("GET", "/v1/topics", None), 401, "credentials needed from the start");
}

#[test]
fn a_user_created_through_one_node_works_through_another_and_a_deleted_one_nowhere() {
    let cluster = TestCluster::start(3);
    let open = AuthClient::new(&cluster.nodes[0].url, None);
    assert_eq!(open.status("POST", "/v1/topics", Some(&json!({ "name": "t" }))), 201);
    create_user(&open, "root", "root-password", json!([{ "action": "admin" }]));
    let root = AuthClient::new(&cluster.nodes[0].url, Some(("root", "root-password")));
    create_user(&root, "pat", "pat-password", json!([{ "action": "produce", "topics": "t" }]));
    let third = AuthClient::new(&cluster.nodes[2].url, Some(("pat", "pat-password")));
    assert!(wait_until(CONVERGE, || third.produce("t") == 202), "node 3 applied the user");
    assert_eq!(root.status("DELETE", "/v1/users/pat", None), 204);
    for ix in 0..3 {
        let pat = AuthClient::new(&cluster.nodes[ix].url, Some(("pat", "pat-password")));
        assert!(wait_until(CONVERGE, || pat.produce("t") == 401), "refused on node {}", ix + 1);
    }
}

/// `narad user ...` and the other client commands with `--user`: users are managed from the
/// command line, passwords come from a file, and a DELETE from the CLI passes the browser guard.
#[test]
fn the_cli_manages_users_and_sends_credentials() {
    let (_tmp, dir) = data_dir();
    let node = TestNode::start(&dir);
    let open = AuthClient::new(&node.url, None);
    create_user(&open, "root", "root-password", json!([{ "action": "admin" }]));
    let password_file = dir.with_extension("pw");
    std::fs::write(&password_file, "cli-user-password\n").expect("write password");
    let narad = |args: &[&str], user: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_narad"))
            .args(args)
            .args(["--url", &node.url, "--user", user])
            .output()
            .expect("run narad");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    let file = password_file.to_str().expect("UTF-8 path");
    let root = "root:root-password";
    let (ok, out, err) = narad(
        &[
            "user",
            "create",
            "cli",
            "--grant",
            "create:cli.*",
            "--grant",
            "admin:cli.*",
            "--password-file",
            file,
        ],
        root,
    );
    assert!(ok, "{err}");
    assert!(out.contains("\"name\":\"cli\"") && !out.contains("cli-user-password"), "{out}");
    let (ok, out, _) = narad(&["user", "list"], root);
    assert!(ok && out.contains("\"root\"") && out.contains("\"cli\""), "{out}");
    let cli = "cli:cli-user-password";
    assert!(narad(&["topic", "create", "cli.t"], cli).0, "a create grant on cli.*");
    let (ok, _, err) = narad(&["topic", "create", "other"], cli);
    assert!(!ok && err.contains("403"), "{err}");
    assert!(narad(&["topic", "delete", "cli.t"], cli).0, "the CLI's DELETE passes the guard");
    let (ok, _, err) = narad(&["user", "list"], "cli:wrong-password");
    assert!(!ok && err.contains("401"), "{err}");
}

/// `--produce-quota` charges each user apart: user `bulk` spends its quota with one large
/// batch and is answered 429 (with `Retry-After`), while `admin` produces on.
#[test]
fn a_produce_quota_holds_back_the_user_past_it_not_the_others() {
    let (_tmp, dir) = data_dir();
    let password_file = dir.with_extension("admin-password");
    std::fs::write(&password_file, "bootstrap-password\n").expect("write the password file");
    let file = password_file.to_str().expect("UTF-8 path");
    let node =
        TestNode::start_with(&dir, &["--admin-password-file", file, "--produce-quota", "100000"]);
    let admin = AuthClient::new(&node.url, Some(("admin", "bootstrap-password")));
    let created = wait_until(CONVERGE, || admin.status("GET", "/v1/users", None) == 200);
    assert!(created, "the first admin was created; log:\n{}", node.log());
    let topic = json!({ "name": "bulk", "partitions": 1 });
    assert_eq!(admin.status("POST", "/v1/topics", Some(&topic)), 201);
    create_user(
        &admin,
        "bulk",
        "bulk-password",
        json!([{ "action": "produce", "topics": "bulk" }]),
    );
    let bulk = AuthClient::new(&node.url, Some(("bulk", "bulk-password")));
    // 900 kB: 9 s of a 100 kB/s quota.
    let messages: Vec<Value> = (0..300).map(|_| json!({ "payload": "x".repeat(3_000) })).collect();
    let batch = json!({ "messages": messages });
    let (status, answer, _) = bulk.send("POST", "/v1/topics/bulk/produce/batch", Some(&batch));
    assert_eq!(status, 202, "the first batch is taken: {answer}");
    let (status, answer, retry_after) =
        bulk.send("POST", "/v1/topics/bulk/produce", Some(&json!("m")));
    assert_eq!(status, 429, "{answer}");
    let retry_after: u64 = retry_after.and_then(|v| v.parse().ok()).expect("a Retry-After");
    assert!((1..=8).contains(&retry_after), "about 8 s owed: {retry_after}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("produce quota")), "{answer}");
    for _ in 0..20 {
        assert_eq!(admin.produce("bulk"), 202, "another user is not held back");
    }
}
