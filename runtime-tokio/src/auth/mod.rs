//! Who is asking (docs/design.md §8): the HTTP Basic credentials of a request checked against
//! the users of the node's metastore replica, giving the `Principal` the node then checks grants
//! for. Verifying a password runs the KDF (tens of milliseconds, on purpose), so a success is
//! remembered briefly (`cache`), at most `MAX_CONCURRENT_VERIFICATIONS` run at once and the rest
//! wait a bounded time, and a user that keeps sending wrong passwords is throttled (`throttle`)
//! before any KDF run: a flood of bad passwords costs a few runs, not one per request.

pub mod basic;
mod cache;
pub mod setup;
mod throttle;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use narad_core::access::{PasswordHash, Principal};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::env::Entropy;
use crate::http::ApiError;
use crate::password;
use crate::user_directory::UserDirectory;

/// Password verifications running at once (each holds a core for its duration and 19 MiB).
pub const MAX_CONCURRENT_VERIFICATIONS: usize = 1;
/// How long a request waits for a verification slot before it is answered 503.
pub const VERIFICATION_WAIT: Duration = Duration::from_secs(2);

/// Whether a node checks credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMode {
    /// Never (`--insecure-no-auth`): every request is trusted.
    Off,
    /// Whenever a user exists. With none, a node on a loopback address trusts every request (the
    /// two-command start on a laptop); a node on any other address trusts none.
    Users { loopback: bool },
}

/// How a node checks who is asking.
#[derive(Clone, Copy, Debug)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// `/metrics` without credentials (`--metrics-unauthenticated`).
    pub metrics_unauthenticated: bool,
    /// Run long CPU work of requests (the KDF, decoding large batches) on tokio's blocking pool
    /// (production), or inline (the simulator, which must not start threads).
    pub blocking_pool: bool,
    /// The cost of the hashes this node makes.
    pub kdf: password::Kdf,
}

impl AuthSettings {
    /// Production's settings for `mode`.
    pub fn new(mode: AuthMode, metrics_unauthenticated: bool) -> AuthSettings {
        AuthSettings {
            mode,
            metrics_unauthenticated,
            blocking_pool: true,
            kdf: password::Kdf::Recommended,
        }
    }
}

/// The credential check of one node.
pub struct Gate {
    settings: AuthSettings,
    entropy: Arc<dyn Entropy>,
    cache: cache::VerifiedCache,
    throttle: throttle::LoginThrottle,
    permits: Semaphore,
}

impl Gate {
    pub fn new(settings: AuthSettings, entropy: Arc<dyn Entropy>) -> Gate {
        Gate {
            settings,
            cache: cache::VerifiedCache::new(&*entropy),
            entropy,
            throttle: throttle::LoginThrottle::default(),
            permits: Semaphore::new(MAX_CONCURRENT_VERIFICATIONS),
        }
    }

    pub fn settings(&self) -> AuthSettings {
        self.settings
    }

    /// Whether a request must carry credentials, with `users` as they are now.
    pub fn requires_credentials(&self, users: &UserDirectory) -> bool {
        match self.settings.mode {
            AuthMode::Off => false,
            AuthMode::Users { loopback } => !(loopback && users.is_empty()),
        }
    }

    /// Who sent a request with this `Authorization` header (401, 429 or 503 if no one).
    pub async fn principal(
        &self,
        users: &UserDirectory,
        authorization: Option<&HeaderValue>,
    ) -> Result<Principal, ApiError> {
        if !self.requires_credentials(users) {
            return Ok(Principal::Trusted);
        }
        let raw = authorization.ok_or_else(|| unauthorized("credentials required (HTTP Basic)"))?;
        let now = Instant::now();
        if let Some(hit) = self.cache.get(raw.as_bytes(), now)
            && users.get(&hit.name).is_some_and(|c| c.id == hit.id && c.hash == hit.hash)
        {
            return Ok(Principal::User { name: hit.name, id: hit.id });
        }
        let credentials = basic::parse(raw.as_bytes()).map_err(unauthorized)?;
        let Some(known) = users.get(&credentials.name) else {
            return Err(wrong_credentials());
        };
        let (id, hash) = (known.id, known.hash.clone());
        let _permit = self.verification_slot(&credentials.name).await?;
        let name = credentials.name.clone();
        if !self.verify(credentials.password, hash.clone()).await {
            self.throttle.failed(&name, Instant::now());
            tracing::info!(user = %name, "authentication failed: wrong password");
            return Err(wrong_credentials());
        }
        self.throttle.succeeded(&name);
        self.cache.insert(raw.as_bytes(), (&name, id, &hash), Instant::now());
        Ok(Principal::User { name, id })
    }

    /// Waits (bounded) for a verification slot; refuses a throttled user before and after the
    /// wait (its failures may have been counted while it waited).
    async fn verification_slot(
        &self,
        name: &str,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, ApiError> {
        self.throttled(name)?;
        let permit = tokio::time::timeout(VERIFICATION_WAIT, self.permits.acquire())
            .await
            .map_err(|_| busy())?
            .expect("invariant: the semaphore is never closed");
        self.throttled(name)?;
        Ok(permit)
    }

    fn throttled(&self, name: &str) -> Result<(), ApiError> {
        self.throttle.check(name, Instant::now()).map_err(|wait| {
            let secs = u32::try_from(wait.as_secs() + 1).unwrap_or(u32::MAX);
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many wrong passwords for user `{name}`: try again in {secs} s"),
            )
            .with_retry_after(secs)
        })
    }

    /// The hash of a new `password` (400 if its length is refused), made in a verification
    /// slot: it costs what a verification costs.
    pub async fn hash_password(&self, password: String) -> Result<PasswordHash, ApiError> {
        password::validate(&password).map_err(ApiError::bad_request)?;
        let _permit = tokio::time::timeout(VERIFICATION_WAIT, self.permits.acquire())
            .await
            .map_err(|_| busy())?
            .expect("invariant: the semaphore is never closed");
        let (kdf, entropy) = (self.settings.kdf, Arc::clone(&self.entropy));
        let hashed = if self.settings.blocking_pool {
            tokio::task::spawn_blocking(move || password::hash_with(kdf, &password, &*entropy))
                .await
                .map_err(|e| anyhow::anyhow!("the hashing task failed: {e}"))
                .and_then(|hashed| hashed)
        } else {
            password::hash_with(kdf, &password, &*entropy)
        };
        hashed.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    }

    async fn verify(&self, password: String, hash: PasswordHash) -> bool {
        if !self.settings.blocking_pool {
            return password::verify(&password, &hash);
        }
        tokio::task::spawn_blocking(move || password::verify(&password, &hash))
            .await
            .unwrap_or(false)
    }
}

/// A shared gate.
pub type SharedGate = Arc<Gate>;

fn busy() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too many password checks in progress")
        .with_retry_after(1)
}

fn unauthorized(message: &'static str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, message)
}

/// The same answer for an unknown user and a wrong password: which one it was is not told.
fn wrong_credentials() -> ApiError {
    unauthorized("unknown user or wrong password")
}
