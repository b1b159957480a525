//! How `narad serve` sets up access control (docs/design.md §8): its flags, the safe default
//! (a loopback node with no users serves without credentials, any other node refuses to start
//! with no users unless told how to get its first admin or that it may run open), the start-up
//! log line that says which applies, and the bootstrap of the first admin.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use narad_core::access::{Action, Grant, PasswordHash, Principal, TopicPattern};
use narad_core::{ClientError, ClientOp, ClientReply};

use super::{AuthMode, AuthSettings};
use crate::driver::NodeHandle;
use crate::password;

/// The name of the admin `--admin-password-file` creates.
pub const BOOTSTRAP_ADMIN: &str = "admin";
/// How often the bootstrap looks whether the node is ready to create the first admin.
const BOOTSTRAP_POLL: Duration = Duration::from_millis(200);

/// Access-control flags of `narad serve`.
#[derive(Debug, Args, Clone, Default)]
pub struct AccessArgs {
    /// File holding the password of the first admin (user `admin`, grant `admin` on `*`),
    /// created once this node has caught up with the cluster's metastore if the cluster has no
    /// users yet (ignored once it has). Needed to serve on a non-loopback address until users
    /// exist. Pass the same file to every node of a new cluster.
    #[arg(long, value_name = "FILE", env = "NARAD_ADMIN_PASSWORD_FILE")]
    pub admin_password_file: Option<PathBuf>,
    /// Serve without access control on any address: anyone who reaches the HTTP port may do
    /// anything. For networks where something else keeps strangers out.
    #[arg(long, env = "NARAD_INSECURE_NO_AUTH", conflicts_with = "admin_password_file")]
    pub insecure_no_auth: bool,
    /// Serve `/metrics` without credentials (it shows topic names and counters).
    #[arg(long, env = "NARAD_METRICS_UNAUTHENTICATED")]
    pub metrics_unauthenticated: bool,
}

/// What a node serving on `http` checks, and the first admin's password hash if it was given.
pub struct Access {
    pub settings: AuthSettings,
    pub bootstrap_admin: Option<PasswordHash>,
}

impl Access {
    /// No access control (the simulator's default, tests of other things).
    pub fn open() -> Access {
        Access { settings: AuthSettings::new(AuthMode::Off, false), bootstrap_admin: None }
    }

    /// Reads the flags: refuses a non-loopback address with no users and no way to get one.
    pub fn from_args(
        args: &AccessArgs,
        http: SocketAddr,
        has_users: bool,
    ) -> anyhow::Result<Access> {
        let bootstrap_admin = match &args.admin_password_file {
            Some(file) => Some(read_admin_password(file)?),
            None => None,
        };
        // An admin password asks for access control: credentials are needed from the start,
        // on any address.
        let mode = if args.insecure_no_auth {
            AuthMode::Off
        } else {
            AuthMode::Users { loopback: http.ip().is_loopback() && bootstrap_admin.is_none() }
        };
        if mode == (AuthMode::Users { loopback: false }) && !has_users && bootstrap_admin.is_none()
        {
            bail!(
                "refusing to serve {http} (not a loopback address) with no users defined: anyone \
                 who reaches it could do anything. Pass --admin-password-file FILE to create the \
                 first admin (user `admin`), or --insecure-no-auth to serve without access \
                 control on purpose"
            );
        }
        let settings = AuthSettings::new(mode, args.metrics_unauthenticated);
        Ok(Access { settings, bootstrap_admin })
    }

    /// The start-up log line that says how this node checks who is asking.
    pub fn log(&self, http: SocketAddr, has_users: bool) {
        match self.settings.mode {
            AuthMode::Off => tracing::warn!(
                %http,
                "access control is OFF (--insecure-no-auth): anyone who reaches this port may \
                 do anything"
            ),
            AuthMode::Users { loopback: true } if !has_users => tracing::info!(
                %http,
                "no users defined and bound to a loopback address: serving without credentials \
                 until the first user is created (POST /v1/users)"
            ),
            AuthMode::Users { .. } => tracing::info!(
                %http,
                bootstrap_admin = self.bootstrap_admin.is_some(),
                "access control on: every /v1 request needs HTTP Basic credentials"
            ),
        }
    }
}

/// The first admin's password from `file` (one line; a trailing newline is not part of it),
/// hashed.
fn read_admin_password(file: &std::path::Path) -> anyhow::Result<PasswordHash> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --admin-password-file {}", file.display()))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    password::validate(password)
        .map_err(|e| anyhow::anyhow!("--admin-password-file {}: {e}", file.display()))?;
    password::hash(password, &crate::env::OsEntropy)
}

/// Creates the first admin once the node is ready, if the cluster still has no users: a
/// command like any other, so of several nodes started with the same file one creates it and
/// the others are told it exists.
pub async fn bootstrap_admin(node: NodeHandle, hash: PasswordHash) {
    loop {
        if node.is_stopping() {
            return;
        }
        if !node.is_ready() {
            tokio::time::sleep(BOOTSTRAP_POLL).await;
            continue;
        }
        if !node.users().is_empty() {
            return tracing::info!("users exist: --admin-password-file is not needed any more");
        }
        let grants = vec![Grant { action: Action::Admin, topics: TopicPattern::Any }];
        let op = ClientOp::CreateUser { name: BOOTSTRAP_ADMIN.into(), hash: hash.clone(), grants };
        match node.request(op, Principal::Trusted).await {
            Ok(ClientReply::UserCreated(_)) => {
                return tracing::info!(user = BOOTSTRAP_ADMIN, "created the first admin");
            }
            Ok(ClientReply::Error(ClientError::Conflict(_))) => return,
            Ok(other) => tracing::warn!(?other, "creating the first admin failed; retrying"),
            Err(_) => return, // the node stopped
        }
        tokio::time::sleep(BOOTSTRAP_POLL * 5).await;
    }
}
