//! The limit on failed authentications, per client address (the gateway says which address: its `auth::client`
//! reads it through the trusted proxies, and only when a failure needs it).
//!
//! 1. Every failed authentication (no key, a malformed one, an unknown, revoked or expired key) takes a token
//!    from its address's bucket, a GCRA limiter of `governor`: a burst of `server.auth_failures_burst`, then
//!    `server.auth_failures_per_minute`. Past it the address is *limited*: its failures are answered 429
//!    `rate_limit_exceeded` with `Retry-After` (whole seconds until a token is back) instead of 401: a
//!    [`Refused::Rate`]. A refused
//!    failure takes nothing, so an address that keeps trying gets one more guess per token, never more.
//! 2. While an address is limited, a key this node does not hold in memory is refused before the store is asked
//!    (those lookups are rate-limited for the whole process; a limited address must not use them up), and so is
//!    the master key (an operator chose it, so it can be guessed). A valid virtual key (40 random characters)
//!    never touches its address's bucket and is never refused by it: one broken agent behind a NAT does not
//!    lock its neighbours out.
//! 3. The table ([`addresses`](super::addresses)) holds at most [`MAX_ADDRESSES`]. An address is stale once its bucket is certainly full again
//!    (its last failure is a whole refill, burst × interval, old) and it was not logged in the last minute.
//!    Stale addresses are dropped by the gateway's upkeep every minute, and when a new address comes and either
//!    the table is full (at most once a second) or the last sweep is a minute old. When the table is still
//!    full, new addresses share one overflow bucket: memory stays bounded whatever an attacker does.
//! 4. Refusals count in `svc_auth_failures_total{outcome="limited"}`, 401s in `outcome="rejected"`. An address
//!    is logged (`warn`, with its address and failures) when it starts being limited, at most once a minute:
//!    never a line per refusal.

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
