//! Request and token rate limits (`rpm_limit`, `tpm_limit`) per key and per team, with the GCRA limiters
//! of the `governor` crate. Over a limit: 429 `rate_limit_exceeded` with `Retry-After`.
//!
//! Requests are counted at admission. Tokens are counted in two steps: the prompt estimate at admission
//! (refused when the bucket cannot hold it), the completion tokens after the call: as many as the bucket
//! holds are taken, down to an empty bucket, so the next request waits for the refill (a call is never cut
//! short for them, and a completion larger than what is left is not let off whole, as a single
//! all-or-nothing `check_n` would). The master key is never limited (spec 8.2).
//!
//! A key's limiters are found by its id; when `/key/update` changes its limits, new limiters replace the
//! old ones at its next request, and [`RateLimits::retain_keys`] drops those of keys that no longer exist.

use crate::auth::Principal;
use crate::error::ApiError;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};

/// The limiters of one key or team, with the limits they were built for.
struct Limits {
    rpm_limit: Option<u32>,
    tpm_limit: Option<u64>,
    rpm: Option<DefaultDirectRateLimiter>,
    tpm: Option<DefaultDirectRateLimiter>,
}

impl Limits {
    fn new(rpm_limit: Option<u32>, tpm_limit: Option<u64>) -> Limits {
        let per_minute = |n: u32| NonZeroU32::new(n).map(|n| RateLimiter::direct(Quota::per_minute(n)));
        Limits {
            rpm_limit,
            tpm_limit,
            rpm: rpm_limit.and_then(per_minute),
            tpm: tpm_limit.map(|t| u32::try_from(t).unwrap_or(u32::MAX)).and_then(per_minute),
        }
    }

    fn is_for(&self, rpm: Option<u32>, tpm: Option<u64>) -> bool {
        self.rpm_limit == rpm && self.tpm_limit == tpm
    }
}

/// Every limiter of this process.
#[derive(Default)]
pub struct RateLimits {
    keys: RwLock<HashMap<String, Arc<Limits>>>,
    teams: RwLock<HashMap<String, Arc<Limits>>>,
}

fn wait_secs(not_until: &governor::NotUntil<<DefaultClock as Clock>::Instant>) -> u64 {
    // The clock is built only when refusing: creating one runs CPUID, which traps to the hypervisor (~35 µs).
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    wait.as_secs_f64().ceil() as u64
}

fn check(lim: &Limits, who: &str, tokens: u32) -> Result<(), ApiError> {
    if let Some(rpm) = &lim.rpm {
        if let Err(not_until) = rpm.check() {
            return Err(ApiError::rate_limited(&format!("{who} requests per minute"), wait_secs(&not_until)));
        }
    }
    if let (Some(tpm), Some(n)) = (&lim.tpm, NonZeroU32::new(tokens)) {
        match tpm.check_n(n) {
            Ok(Ok(())) => {}
            Ok(Err(not_until)) => {
                return Err(ApiError::rate_limited(&format!("{who} tokens per minute"), wait_secs(&not_until)));
            }
            Err(_) => {
                let what = format!("{who} tokens per minute (the request alone is larger than the limit)");
                return Err(ApiError::rate_limited(&what, 60));
            }
        }
    }
    Ok(())
}

/// Takes `tokens` from a token bucket, or as many as it holds: pieces halve until they fit, so a few
/// attempts empty the bucket.
fn drain(tpm: &DefaultDirectRateLimiter, tokens: u32) {
    let mut left = tokens;
    let mut piece = tokens;
    while left > 0 && piece > 0 {
        piece = piece.min(left);
        let taken = NonZeroU32::new(piece).is_some_and(|n| matches!(tpm.check_n(n), Ok(Ok(()))));
        if taken {
            left -= piece;
        } else {
            piece /= 2;
        }
    }
}

/// The limiters of `id` in `map` for these limits, made (or remade, when the limits changed) as needed.
fn limits_in(
    map: &RwLock<HashMap<String, Arc<Limits>>>,
    id: &str,
    rpm: Option<u32>,
    tpm: Option<u64>,
) -> Option<Arc<Limits>> {
    if rpm.is_none() && tpm.is_none() {
        return None;
    }
    if let Some(l) = map.read().ok().and_then(|m| m.get(id).cloned()) {
        if l.is_for(rpm, tpm) {
            return Some(l);
        }
    }
    let mut m = map.write().ok()?;
    let entry = m.entry(id.to_string()).or_insert_with(|| Arc::new(Limits::new(rpm, tpm)));
    if !entry.is_for(rpm, tpm) {
        *entry = Arc::new(Limits::new(rpm, tpm));
    }
    Some(entry.clone())
}

impl RateLimits {
    fn key_limits(&self, principal: &Principal) -> Option<Arc<Limits>> {
        let k = principal.key()?;
        limits_in(&self.keys, &k.id, k.rpm_limit, k.tpm_limit)
    }

    fn team_limits(&self, principal: &Principal, config: &svc_config::Config) -> Option<Arc<Limits>> {
        let k = principal.key()?;
        let team = config.team(&k.team_id)?;
        limits_in(&self.teams, &team.team_id, team.rpm_limit, team.tpm_limit)
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

    /// Charges completion tokens after a call: all of them, or as many as the buckets hold.
    pub fn charge(&self, principal: &Principal, config: &svc_config::Config, completion_tokens: u64) {
        let n = u32::try_from(completion_tokens).unwrap_or(u32::MAX);
        if n == 0 {
            return;
        }
        for l in [self.key_limits(principal), self.team_limits(principal, config)].into_iter().flatten() {
            if let Some(tpm) = &l.tpm {
                drain(tpm, n);
            }
        }
    }

    /// Drops the limiters of keys not in `ids` (deleted keys).
    pub fn retain_keys(&self, ids: &HashSet<String>) {
        if let Ok(mut m) = self.keys.write() {
            m.retain(|id, _| ids.contains(id));
        }
    }

    /// Keys with limiters (tests).
    #[cfg(test)]
    fn key_count(&self) -> usize {
        self.keys.read().map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::VirtualKey;

    fn key(tpm: Option<u64>) -> Principal {
        Principal::Key(Arc::new(VirtualKey {
            id: "k".into(),
            hint: "sk-svc-…abcd".into(),
            alias: None,
            team_id: "t".into(),
            agent_role: None,
            models: vec![],
            events: vec![],
            max_budget: None,
            budget_duration: None,
            rpm_limit: None,
            tpm_limit: tpm,
            expires: None,
            revoked: false,
            anchor: chrono::DateTime::<chrono::Utc>::default(),
        }))
    }

    fn config() -> svc_config::Config {
        let yaml = "model_list:\n  - model_name: m\n    params: { model: mock/m }\n";
        svc_config::load_str(yaml, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_completion_larger_than_what_is_left_empties_the_bucket() {
        let (limits, config) = (RateLimits::default(), config());
        let p = key(Some(1_000));
        assert!(limits.admit(&p, &config, 200).is_ok());
        // 1,500 completion tokens with 800 left: the 800 are taken (check_n alone would have taken none).
        limits.charge(&p, &config, 1_500);
        let refused = limits.admit(&p, &config, 100).err();
        assert_eq!(refused.map(|e| e.status().as_u16()), Some(429), "the bucket is empty");
    }

    #[test]
    fn changed_limits_take_effect_and_deleted_keys_are_dropped() {
        let (limits, config) = (RateLimits::default(), config());
        assert!(limits.admit(&key(Some(100)), &config, 100).is_ok());
        assert!(limits.admit(&key(Some(100)), &config, 1).is_err());
        // `/key/update` raised the limit: fresh limiters.
        assert!(limits.admit(&key(Some(10_000)), &config, 1).is_ok());
        assert_eq!(limits.key_count(), 1);
        limits.retain_keys(&HashSet::new());
        assert_eq!(limits.key_count(), 0);
    }
}
