//! Request and token rate limits (`rpm_limit`, `tpm_limit`) per key and per team, with the GCRA limiters
//! of the `governor` crate. Over a limit: 429 `rate_limit_exceeded` with `Retry-After`.
//!
//! Requests are counted at admission (a `POST /messages/count_tokens` too, with no tokens). Tokens are
//! counted in two steps: the prompt estimate at admission (refused when the bucket cannot hold it), the
//! completion tokens after the call: as many as the bucket holds are taken, down to an empty bucket, so the
//! next request waits for the refill (a call is never cut short for them, and a completion larger than what is
//! left is not let off whole, as a single all-or-nothing `check_n` would). The master key is never limited
//! (README: Authentication).
//!
//! In fleet mode the limits hold across the fleet: see [`fleet`].
//!
//! A key's limiters are found by its id; when `/key/update` changes its limits, new limiters replace the
//! old ones at its next request, and [`RateLimits::retain_keys`] drops those of keys that no longer exist.

pub mod addresses;
mod auth_failures;
pub mod fleet;

pub use auth_failures::AuthFailures;

use crate::refused::Refused;
use foldhash::HashMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::{Arc, RwLock};
use svc_keys::Principal;

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
    /// Fleet mode: the fleet's buckets (the limiters above serve only when the store does not answer).
    fleet: Option<Arc<fleet::FleetRates>>,
}

/// Whose limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// A virtual key's.
    Key,
    /// Its team's.
    Team,
}

impl Who {
    fn as_str(self) -> &'static str {
        match self {
            Who::Key => "key",
            Who::Team => "team",
        }
    }
}

/// The limits of one key or team, as a request finds them.
struct Scope<'a> {
    who: Who,
    id: &'a str,
    rpm: Option<u32>,
    tpm: Option<u64>,
}

fn wait_secs(not_until: &governor::NotUntil<<DefaultClock as Clock>::Instant>) -> u64 {
    // The clock is built only when refusing: creating one runs CPUID, which traps to the hypervisor (~35 µs).
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    wait.as_secs_f64().ceil() as u64
}

fn check(lim: &Limits, who: &str, tokens: u32) -> Result<(), Refused> {
    if let Some(rpm) = &lim.rpm {
        if let Err(not_until) = rpm.check() {
            return Err(Refused::Rate {
                what: format!("{who} requests per minute").into(),
                retry_after_secs: wait_secs(&not_until),
            });
        }
    }
    if let (Some(tpm), Some(n)) = (&lim.tpm, NonZeroU32::new(tokens)) {
        match tpm.check_n(n) {
            Ok(Ok(())) => {}
            Ok(Err(not_until)) => {
                return Err(Refused::Rate {
                    what: format!("{who} tokens per minute").into(),
                    retry_after_secs: wait_secs(&not_until),
                });
            }
            Err(_) => {
                let what = format!("{who} tokens per minute (the request alone is larger than the limit)");
                return Err(Refused::Rate { what: what.into(), retry_after_secs: 60 });
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
    /// Limits held across the fleet, with `fleet`'s buckets.
    pub fn for_fleet(fleet: Arc<fleet::FleetRates>) -> RateLimits {
        RateLimits { fleet: Some(fleet), ..RateLimits::default() }
    }

    /// The fleet's buckets, in fleet mode.
    pub fn fleet(&self) -> Option<&Arc<fleet::FleetRates>> {
        self.fleet.as_ref()
    }

    /// The key's and its team's limits (no allocation: this runs for every request).
    fn scopes<'a>(principal: &'a Principal, config: &'a svc_config::Config) -> [Option<Scope<'a>>; 2] {
        let Some(k) = principal.key() else { return [None, None] };
        let team = config.team(&k.team_id).map(|t| Scope {
            who: Who::Team,
            id: &t.team_id,
            rpm: t.rpm_limit,
            tpm: t.tpm_limit,
        });
        [Some(Scope { who: Who::Key, id: &k.id, rpm: k.rpm_limit, tpm: k.tpm_limit }), team]
    }

    fn local(&self, s: &Scope) -> Option<Arc<Limits>> {
        let map = match s.who {
            Who::Key => &self.keys,
            Who::Team => &self.teams,
        };
        limits_in(map, s.id, s.rpm, s.tpm)
    }

    /// Counts a request (and its estimated prompt tokens) against the key's and the team's limits.
    pub async fn admit(
        &self,
        principal: &Principal,
        config: &svc_config::Config,
        prompt_tokens: u64,
    ) -> Result<(), Refused> {
        let tokens = u32::try_from(prompt_tokens).unwrap_or(u32::MAX);
        for s in Self::scopes(principal, config).into_iter().flatten() {
            if s.rpm.is_none() && s.tpm.is_none() {
                continue;
            }
            match &self.fleet {
                Some(f) => self.admit_fleet(f, &s, tokens).await?,
                None => {
                    if let Some(l) = self.local(&s) {
                        check(&l, s.who.as_str(), tokens)?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn admit_fleet(&self, f: &Arc<fleet::FleetRates>, s: &Scope<'_>, tokens: u32) -> Result<(), Refused> {
        let who = s.who.as_str();
        let limits = [
            (false, s.rpm.map(i64::from), 1, "requests per minute"),
            (true, s.tpm.map(|t| i64::try_from(t).unwrap_or(i64::MAX)), i64::from(tokens), "tokens per minute"),
        ];
        for (tokens_bucket, limit, n, what) in limits {
            let Some(limit) = limit.filter(|l| *l > 0) else { continue };
            if n <= 0 {
                continue;
            }
            if n > limit {
                let what = format!("{who} {what} (the request alone is larger than the limit)");
                return Err(Refused::Rate { what: what.into(), retry_after_secs: 60 });
            }
            match f.take(fleet::Bucket { who: s.who, tokens: tokens_bucket }, s.id, limit, n).await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(Refused::Rate {
                        what: format!("{who} {what}").into(),
                        retry_after_secs: fleet::refill_secs(n, limit),
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach the fleet's rate limits: this node limits on its own");
                    if let Some(l) = self.local(s) {
                        return check(&l, who, tokens);
                    }
                }
            }
        }
        Ok(())
    }

    /// Charges completion tokens after a call: all of them, or as many as the buckets hold.
    pub fn charge(&self, principal: &Principal, config: &svc_config::Config, completion_tokens: u64) {
        let n = u32::try_from(completion_tokens).unwrap_or(u32::MAX);
        if n == 0 {
            return;
        }
        for s in Self::scopes(principal, config).into_iter().flatten() {
            let Some(tpm) = s.tpm else { continue };
            match &self.fleet {
                Some(f) => {
                    let limit = i64::try_from(tpm).unwrap_or(i64::MAX);
                    f.charge(fleet::Bucket { who: s.who, tokens: true }, s.id, limit, i64::from(n));
                }
                None => {
                    if let Some(tpm) = self.local(&s).as_ref().and_then(|l| l.tpm.as_ref()) {
                        drain(tpm, n);
                    }
                }
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
    use svc_keys::VirtualKey;

    fn key(tpm: Option<u64>) -> Principal {
        let row = svc_store::KeyRow { id: "k".into(), team_id: "t".into(), ..Default::default() };
        Principal::Key(Arc::new(VirtualKey { tpm_limit: tpm, ..VirtualKey::from_row(&row) }))
    }

    fn config() -> svc_config::Config {
        let yaml = "model_list:\n  - model_name: m\n    params: { model: mock/m }\n";
        svc_config::load_str(yaml, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_completion_larger_than_what_is_left_empties_the_bucket() {
        let (limits, config) = (RateLimits::default(), config());
        let p = key(Some(1_000));
        assert!(limits.admit(&p, &config, 200).await.is_ok());
        // 1,500 completion tokens with 800 left: the 800 are taken (check_n alone would have taken none).
        limits.charge(&p, &config, 1_500);
        let refused = limits.admit(&p, &config, 100).await.err();
        assert!(matches!(refused, Some(Refused::Rate { .. })), "the bucket is empty: {refused:?}");
    }

    #[tokio::test]
    async fn changed_limits_take_effect_and_deleted_keys_are_dropped() {
        let (limits, config) = (RateLimits::default(), config());
        assert!(limits.admit(&key(Some(100)), &config, 100).await.is_ok());
        assert!(limits.admit(&key(Some(100)), &config, 1).await.is_err());
        // `/key/update` raised the limit: fresh limiters.
        assert!(limits.admit(&key(Some(10_000)), &config, 1).await.is_ok());
        assert_eq!(limits.key_count(), 1);
        limits.retain_keys(&HashSet::new());
        assert_eq!(limits.key_count(), 0);
    }
}
