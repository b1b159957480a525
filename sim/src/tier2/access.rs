//! Tier 2 with access control on (docs/design.md §8), on the seeds that run the access client:
//! every node starts as `narad serve --admin-password-file` starts it (credentials needed from
//! the first request, the first admin created by the node itself once it is ready), with the
//! cheap KDF run inline (turmoil's hosts start no threads, and a sweep logs in thousands of
//! times). Every request then carries credentials: the access client's own for its requests as
//! its users, the bootstrap admin's for everything else. Every answer to the admin is judged by
//! the access checker too: the admin holds `admin` on `*` from its create on, so it is refused
//! only by a node whose users do not hold it yet (a restart, a replica behind), and that 401
//! is a refusal before anything ran, which the workload then retries like a 503 (the access
//! client, whose answers say whether its users exist, reads it as the 401 it is).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use narad::auth::setup::{Access, BOOTSTRAP_ADMIN};
use narad::auth::{AuthMode, AuthSettings};
use narad::password::Kdf;
use narad_core::{ClientError, ClientReply};

use crate::checker::{AccessAsk, AccessNeed, AsUser};
use crate::workload::Who;

/// The bootstrap admin's name.
pub const ADMIN: &str = BOOTSTRAP_ADMIN;
/// The bootstrap admin's password (what `--admin-password-file` holds).
const ADMIN_PASSWORD: &str = "tier-2 bootstrap admin";

/// HTTP Basic credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Basic {
    pub name: String,
    pub password: String,
}

impl Basic {
    /// The bootstrap admin's.
    pub fn admin() -> Basic {
        Basic { name: ADMIN.to_string(), password: ADMIN_PASSWORD.to_string() }
    }

    /// The `Authorization` header's value.
    pub fn header(&self) -> String {
        format!("Basic {}", STANDARD.encode(format!("{}:{}", self.name, self.password)))
    }
}

/// How a node checks who is asking: with `admin` as `--admin-password-file` sets it up (the
/// hash's salt from `entropy`, the node's seam), or not at all. Either way the KDF and the
/// decoding of large batches run inline: the simulator starts no threads.
pub fn node_access(admin: Option<&Basic>, entropy: &dyn narad::env::Entropy) -> Access {
    let mut access = match admin {
        None => Access::open(),
        Some(admin) => {
            let mut settings = AuthSettings::new(AuthMode::Users { loopback: false }, false);
            settings.kdf = Kdf::Cheap;
            let hash = narad::password::hash_with(Kdf::Cheap, &admin.password, entropy)
                .expect("invariant: a valid password hashes");
            Access { settings, bootstrap_admin: Some(hash) }
        }
    };
    access.settings.blocking_pool = false;
    access
}

/// The credentials a request from `who` carries (`admin`: the bootstrap admin's, when access
/// control is on).
pub fn credentials(who: &Who, admin: Option<&Basic>) -> Option<Basic> {
    match who {
        Who::Basic { name, password } => {
            Some(Basic { name: name.clone(), password: password.clone() })
        }
        Who::Principal(_) => admin.cloned(),
    }
}

/// What the access checker judges an answer to the admin by: it may do everything.
pub fn admin_ask() -> AccessAsk {
    AccessAsk { name: ADMIN.to_string(), who: AsUser::Any, need: AccessNeed::ClusterAdmin }
}

/// An answer to the admin as the workload takes it: a 401 (the node's users do not hold the
/// admin yet) is a refusal before anything ran.
pub fn admin_answer(reply: ClientReply) -> ClientReply {
    match reply {
        ClientReply::Error(ClientError::Unauthenticated(message)) => ClientReply::Error(
            ClientError::Unavailable(format!("401 to the bootstrap admin: {message}")),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_basic_base64_of_name_colon_password() {
        let basic = Basic { name: "u0".into(), password: "secret-u0-1".into() };
        assert_eq!(basic.header(), "Basic dTA6c2VjcmV0LXUwLTE=");
    }

    #[test]
    fn trusted_requests_carry_the_admin_s_credentials_only_with_access_control_on() {
        let admin = Basic::admin();
        assert_eq!(credentials(&Who::trusted(), None), None);
        assert_eq!(credentials(&Who::trusted(), Some(&admin)), Some(admin.clone()));
        let user = Who::Basic { name: "u1".into(), password: "secret-u1-2".into() };
        let sent = credentials(&user, Some(&admin)).expect("its own");
        assert_eq!((sent.name.as_str(), sent.password.as_str()), ("u1", "secret-u1-2"));
    }

    #[test]
    fn only_the_admin_s_401_becomes_a_retry() {
        let unauthenticated = ClientReply::Error(ClientError::Unauthenticated("who".into()));
        let ClientReply::Error(error) = admin_answer(unauthenticated) else { panic!() };
        assert_eq!(error.http_status(), 503);
        let forbidden = ClientReply::Error(ClientError::Forbidden("no".into()));
        assert_eq!(admin_answer(forbidden.clone()), forbidden);
    }
}
