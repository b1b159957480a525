//! The users as the HTTP layer checks passwords against them (docs/design.md §8): a copy of what
//! the node's metastore replica holds (name, incarnation, password hash), which the driver
//! replaces whenever the replica's users may have changed. Handlers read it without asking the
//! driver, so an authenticated produce costs no extra round trip; the node checks the grants
//! again against its own replica, so a copy a moment old grants nothing the node refuses.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use narad_core::access::{Needs, PasswordHash, UserId, allows};
use narad_core::meta::users::Users;

/// One user's credentials.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub id: UserId,
    pub hash: PasswordHash,
    /// Holds `admin` on `*` (user administration may run the KDF: only admins get that far).
    pub admin: bool,
}

/// Every user's credentials, as of one metastore state.
#[derive(Debug, Default)]
pub struct UserDirectory {
    users: BTreeMap<String, Credentials>,
}

impl UserDirectory {
    /// A copy of `users`.
    pub fn of(users: &Users) -> UserDirectory {
        let users = users
            .with_hashes()
            .map(|(info, hash)| {
                let admin = allows(&info.grants, Needs::ClusterAdmin);
                (info.name.clone(), Credentials { id: info.id, hash: hash.clone(), admin })
            })
            .collect();
        UserDirectory { users }
    }

    pub fn get(&self, name: &str) -> Option<&Credentials> {
        self.users.get(name)
    }

    /// No user is defined (what decides whether a loopback node checks credentials at all).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The current copy, shared by the driver (which replaces it) and the HTTP layer.
#[derive(Clone, Debug, Default)]
pub struct SharedDirectory(Arc<RwLock<Arc<UserDirectory>>>);

impl SharedDirectory {
    /// The current copy (cheap: one lock and one reference count).
    pub fn load(&self) -> Arc<UserDirectory> {
        self.0.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub fn replace(&self, directory: UserDirectory) {
        *self.0.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(directory);
    }
}
