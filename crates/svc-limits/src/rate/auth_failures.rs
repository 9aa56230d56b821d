//! The limit on failed authentications per client address: [`AuthFailures`] counts each failure in its
//! address's bucket of the [`addresses`](super::addresses) table (a burst of `server.auth_failures_burst`, then
//! `server.auth_failures_per_minute`; the table's rules are that module's) and, past it, refuses with a
//! [`Refused::Rate`] (the gateway's 429 with `Retry-After`, in whole seconds until a token is back) where the caller
//! would answer its own 401. A refused failure takes nothing, so an address that keeps trying gets one more guess
//! per token, never more. The address is read only when it is needed (the gateway's `auth::client` reads it
//! through the trusted proxies); which requests ask at all (a failure; the master key and a key not in memory
//! from a limited address; never a valid virtual key) is the gateway's authentication's rule.
//!
//! Refusals count in `svc_auth_failures_total{outcome="limited"}`, 401s in `outcome="rejected"`. An address is
//! logged (`warn`, with its address and failures) when it starts being limited, at most once a minute: never a
//! line per refusal.

use super::addresses::{Slot, Table, MAX_ADDRESSES};
use crate::Refused;
use governor::clock::QuantaClock;
use prometheus::IntCounter;
use std::net::IpAddr;
use std::num::NonZeroU32;
use svc_config::ServerConfig;

/// The failed authentications of a gateway: the table (`None` when the limit is off) and the counters of
/// `svc_auth_failures_total` (`rejected`, `limited`).
pub struct AuthFailures {
    table: Option<Table<QuantaClock>>,
    rejected: IntCounter,
    limited: IntCounter,
}

impl AuthFailures {
    /// The limit of `server` (off when its burst or its rate is 0), counted in `rejected` and `limited`.
    pub fn new(server: &ServerConfig, rejected: IntCounter, limited: IntCounter) -> AuthFailures {
        let limit = NonZeroU32::new(server.auth_failures_burst).zip(NonZeroU32::new(server.auth_failures_per_minute));
        AuthFailures {
            table: limit.map(|(burst, rate)| Table::new(burst, rate, MAX_ADDRESSES, QuantaClock::default())),
            rejected,
            limited,
        }
    }

    /// Drops the addresses whose buckets are full again (the upkeep runs this every minute).
    pub fn sweep(&self) {
        if let Some(table) = &self.table {
            table.sweep();
        }
    }

    /// Refused when the address of `client` (read only when the table is in use) is limited now; takes nothing
    /// from its bucket.
    pub fn refuse_if_limited(&self, client: impl FnOnce() -> IpAddr) -> Result<(), Refused> {
        let Some(table) = &self.table else { return Ok(()) };
        if !table.in_use() {
            return Ok(());
        }
        match table.limited(Slot::of(client())) {
            None => Ok(()),
            Some(retry_after) => {
                self.limited.inc();
                Err(limited(retry_after))
            }
        }
    }

    /// Counts a failed authentication from `client` (its address read only when the limit is on): `Ok` while the
    /// address is within the limit (the caller answers its own refusal, a 401), else refused.
    pub fn failed(&self, client: impl FnOnce() -> IpAddr) -> Result<(), Refused> {
        let Some(table) = &self.table else {
            self.rejected.inc();
            return Ok(());
        };
        let slot = Slot::of(client());
        let Err(over) = table.fail(slot) else {
            self.rejected.inc();
            return Ok(());
        };
        self.limited.inc();
        match over.log {
            Some(failures) if over.shared => tracing::warn!(
                failures,
                "failed authentications are limited for the addresses beyond the {MAX_ADDRESSES} this node \
                 tracks, which share one bucket: each is answered 429 until a token is back"
            ),
            Some(failures) => tracing::warn!(
                address = %slot,
                failures,
                "failed authentications from this address are limited: each is answered 429 until a token is \
                 back (server.auth_failures_burst, server.auth_failures_per_minute)"
            ),
            None => {}
        }
        Err(limited(over.retry_after))
    }
}

/// The refusal of a limited address.
fn limited(retry_after_secs: u64) -> Refused {
    Refused::Rate { what: "too many failed authentications from this address".into(), retry_after_secs }
}
