//! Request and token rate limits (`rpm_limit`, `tpm_limit`) per key and per team, with the GCRA limiters
//! of the `governor` crate. Over a limit: 429 `rate_limit_exceeded` with `Retry-After`.
//!
//! Requests are counted at admission. Tokens are counted in two steps: the prompt estimate at admission
//! (refused when the bucket cannot hold it), the completion tokens after the call (charged as far as the
//! bucket allows; a call is never cut short for them). The master key is never limited (spec 8.2).

use crate::auth::Principal;
use crate::error::ApiError;
use axum::http::StatusCode;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

/// The limiters of one key or team.
struct Limits {
    rpm: Option<DefaultDirectRateLimiter>,
    tpm: Option<DefaultDirectRateLimiter>,
}

impl Limits {
    fn new(rpm: Option<u32>, tpm: Option<u64>) -> Limits {
        let per_minute = |n: u32| NonZeroU32::new(n).map(|n| RateLimiter::direct(Quota::per_minute(n)));
        Limits {
            rpm: rpm.and_then(per_minute),
            tpm: tpm.map(|t| u32::try_from(t).unwrap_or(u32::MAX)).and_then(per_minute),
        }
    }
}

/// A key's limiters are found by its id and its current limits, so `/key/update` takes effect at once.
type KeyLimits = HashMap<(String, Option<u32>, Option<u64>), Arc<Limits>>;

/// Every limiter of this process.
#[derive(Default)]
pub struct RateLimits {
    keys: RwLock<KeyLimits>,
    teams: RwLock<HashMap<String, Arc<Limits>>>,
}

fn limited(what: &str, wait_secs: u64) -> ApiError {
    let mut e =
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded", format!("Rate limit exceeded: {what}"));
    e.retry_after = Some(wait_secs.max(1));
    e
}

fn check(lim: &Limits, who: &str, tokens: u32) -> Result<(), ApiError> {
    // The clock is built only when refusing: creating one runs CPUID, which traps to the hypervisor (~35 µs).
    if let Some(rpm) = &lim.rpm {
        if let Err(not_until) = rpm.check() {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            return Err(limited(&format!("{who} requests per minute"), wait.as_secs_f64().ceil() as u64));
        }
    }
    if let (Some(tpm), Some(n)) = (&lim.tpm, NonZeroU32::new(tokens)) {
        match tpm.check_n(n) {
            Ok(Ok(())) => {}
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                return Err(limited(&format!("{who} tokens per minute"), wait.as_secs_f64().ceil() as u64));
            }
            Err(_) => {
                return Err(limited(
                    &format!("{who} tokens per minute (the request alone is larger than the limit)"),
                    60,
                ))
            }
        }
    }
    Ok(())
}

impl RateLimits {
    fn key_limits(&self, principal: &Principal) -> Option<Arc<Limits>> {
        let k = principal.key()?;
        if k.rpm_limit.is_none() && k.tpm_limit.is_none() {
            return None;
        }
        let id = (k.id.clone(), k.rpm_limit, k.tpm_limit);
        if let Some(l) = self.keys.read().ok().and_then(|m| m.get(&id).cloned()) {
            return Some(l);
        }
        let mut m = self.keys.write().ok()?;
        Some(m.entry(id).or_insert_with(|| Arc::new(Limits::new(k.rpm_limit, k.tpm_limit))).clone())
    }

    fn team_limits(&self, principal: &Principal, config: &svc_config::Config) -> Option<Arc<Limits>> {
        let k = principal.key()?;
        let team = config.team(&k.team_id)?;
        if team.rpm_limit.is_none() && team.tpm_limit.is_none() {
            return None;
        }
        if let Some(l) = self.teams.read().ok().and_then(|m| m.get(&team.team_id).cloned()) {
            return Some(l);
        }
        let mut m = self.teams.write().ok()?;
        Some(
            m.entry(team.team_id.clone())
                .or_insert_with(|| Arc::new(Limits::new(team.rpm_limit, team.tpm_limit)))
                .clone(),
        )
    }

    /// Counts a request (and its estimated prompt tokens) against the key's and the team's limits.
    pub fn admit(
        &self,
        principal: &Principal,
        config: &svc_config::Config,
        prompt_tokens: u64,
    ) -> Result<(), ApiError> {
        let tokens = u32::try_from(prompt_tokens).unwrap_or(u32::MAX);
        if let Some(l) = self.key_limits(principal) {
            check(&l, "key", tokens)?;
        }
        if let Some(l) = self.team_limits(principal, config) {
            check(&l, "team", tokens)?;
        }
        Ok(())
    }

    /// Charges completion tokens after a call, as far as the buckets allow.
    pub fn charge(&self, principal: &Principal, config: &svc_config::Config, completion_tokens: u64) {
        let Some(n) = NonZeroU32::new(u32::try_from(completion_tokens).unwrap_or(u32::MAX)) else { return };
        for l in [self.key_limits(principal), self.team_limits(principal, config)].into_iter().flatten() {
            if let Some(tpm) = &l.tpm {
                let _ = tpm.check_n(n);
            }
        }
    }
}
