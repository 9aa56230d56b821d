//! The limit on failed authentications, per client address (`client.rs` says which address).
//!
//! 1. Every failed authentication (no key, a malformed one, an unknown, revoked or expired key) takes a token
//!    from its address's bucket, a GCRA limiter of `governor`: a burst of `server.auth_failures_burst`, then
//!    `server.auth_failures_per_minute`. Past it the address is *limited*: its failures are answered 429
//!    `rate_limit_exceeded` with `Retry-After` (whole seconds until a token is back) instead of 401. A refused
//!    failure takes nothing, so an address that keeps trying gets one more guess per token, never more.
//! 2. While an address is limited, a key this node does not hold in memory is refused before the store is asked
//!    (those lookups are rate-limited for the whole process; a limited address must not use them up), and so is
//!    the master key (an operator chose it, so it can be guessed). A valid virtual key (40 random characters)
//!    never touches its address's bucket and is never refused by it: one broken agent behind a NAT does not
//!    lock its neighbours out.
//! 3. The table holds at most [`MAX_ADDRESSES`]. An address is stale once its bucket is certainly full again
//!    (its last failure is a whole refill, burst × interval, old) and it was not logged in the last minute.
//!    Stale addresses are dropped by the gateway's upkeep every minute, and when a new address comes and either
//!    the table is full (at most once a second) or the last sweep is a minute old. When the table is still
//!    full, new addresses share one overflow bucket: memory stays bounded whatever an attacker does.
//! 4. Refusals count in `svc_auth_failures_total{outcome="limited"}`, 401s in `outcome="rejected"`. An address
//!    is logged (`warn`, with its address and failures) when it starts being limited, at most once a minute:
//!    never a line per refusal.
//!
//! The table of buckets by address (points 1 and 3) is svc-limits' `rate::addresses`; this file reads the
//! address, answers, counts and logs. What it does not do: decide whether a key is valid (`mod.rs` does), or
//! touch anything on the path of a valid virtual key.

use super::client::Origin;
use crate::error::ApiError;
use governor::clock::QuantaClock;
use prometheus::IntCounter;
use std::num::NonZeroU32;
use svc_config::{IpBlock, ServerConfig};
use svc_limits::rate::addresses::{Slot, Table, MAX_ADDRESSES};

/// The failed authentications of the gateway: the table (`None` when the limit is off), whose addresses are
/// read through the trusted proxies, and the counters of `svc_auth_failures_total`.
pub struct AuthFailures {
    table: Option<Table<QuantaClock>>,
    trusted: Vec<IpBlock>,
    rejected: IntCounter,
    limited: IntCounter,
}

impl AuthFailures {
    /// The limit of `server` (off when its burst or its rate is 0), counted in `metrics`.
    pub fn new(server: &ServerConfig, metrics: &crate::observe::Metrics) -> AuthFailures {
        let limit = NonZeroU32::new(server.auth_failures_burst).zip(NonZeroU32::new(server.auth_failures_per_minute));
        AuthFailures {
            table: limit.map(|(burst, rate)| Table::new(burst, rate, MAX_ADDRESSES, QuantaClock::default())),
            trusted: server.trusted_proxies.clone(),
            rejected: metrics.auth_failures("rejected"),
            limited: metrics.auth_failures("limited"),
        }
    }

    /// Drops the addresses whose buckets are full again (the upkeep runs this every minute).
    pub fn sweep(&self) {
        if let Some(table) = &self.table {
            table.sweep();
        }
    }

    /// The 429 to answer when the request's address is limited now; takes nothing from its bucket.
    pub fn refuse_if_limited(&self, from: &Origin<'_>) -> Result<(), ApiError> {
        let Some(table) = &self.table else { return Ok(()) };
        if !table.in_use() {
            return Ok(());
        }
        match table.limited(Slot::of(from.client_ip(&self.trusted))) {
            None => Ok(()),
            Some(retry_after) => {
                self.limited.inc();
                Err(ApiError::failed_authentications(retry_after))
            }
        }
    }

    /// Counts a failed authentication of the request: `refusal` (its 401) while its address is within the
    /// limit, else the 429.
    pub fn failed(&self, from: &Origin<'_>, refusal: ApiError) -> ApiError {
        let Some(table) = &self.table else {
            self.rejected.inc();
            return refusal;
        };
        let slot = Slot::of(from.client_ip(&self.trusted));
        let Err(limited) = table.fail(slot) else {
            self.rejected.inc();
            return refusal;
        };
        self.limited.inc();
        match limited.log {
            Some(failures) if limited.shared => tracing::warn!(
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
        ApiError::failed_authentications(limited.retry_after)
    }
}
