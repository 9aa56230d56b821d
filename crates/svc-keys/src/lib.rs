//! Virtual keys (spec 5): generating and hashing their secrets, the [`KeyCache`] that authentication reads
//! without touching the store, [`Principal`] (who is calling), and the rules of key and team administration
//! ([`admin`]) that the admin API and the `svc keys` CLI both apply.
//!
//! Boundary: no HTTP here. A refused rule is an [`AdminError`] or a [`Forbidden`]; the gateway alone turns them
//! into statuses, the CLI into exit codes.

pub mod admin;
mod key;
mod principal;
pub mod teams;
mod watch;

pub use admin::AdminError;
pub use key::{
    generate_secret, hash_secret, hint_of, looks_like_key, KeyCache, KeyHash, VirtualKey, KEY_PREFIX,
    MISS_LOOKUPS_PER_SECOND,
};
pub use principal::{Forbidden, Principal};
pub use watch::watch;
