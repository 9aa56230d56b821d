//! Bounded retries with exponential backoff and jitter (backon): the one source of waits between attempts on
//! the event path. Senders make one attempt each; their callers own the retries: `svc-notify` wraps single
//! attempts in [`RetryPolicy::run`], the gateway's outbox worker asks [`RetryPolicy::delay_before`] when to try
//! a stored row again.
//!
//! The policy decides how long to wait; the error decides whether to retry at all ([`Transient`]) and may ask
//! for a specific wait (`Retry-After`). This module does not know HTTP; the senders classify their own errors.

use backon::{BackoffBuilder as _, ExponentialBuilder, Retryable as _};
use std::future::Future;
use std::time::Duration;

/// An error that may go away by itself.
pub trait Transient {
    /// Whether another attempt could succeed (connection errors, timeouts, 408, 429, 5xx).
    fn is_transient(&self) -> bool;
    /// A wait the server asked for (`Retry-After`), if any.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

/// How to wait between attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first wait.
    pub min_delay: Duration,
    /// No wait is longer than this (except a `Retry-After`, capped by `max_retry_after`).
    pub max_delay: Duration,
    /// Each wait is this many times the previous one.
    pub factor: f32,
    /// A server's `Retry-After` is honoured up to this long.
    pub max_retry_after: Duration,
    /// Randomize each wait (backon adds up to one extra delay), so many senders do not retry in step.
    pub jitter: bool,
}

impl RetryPolicy {
    /// Webhooks: 1 s, 2 s, 4 s … up to 60 s, `Retry-After` honoured up to 5 minutes.
    pub const WEBHOOK: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(60),
        factor: 2.0,
        max_retry_after: Duration::from_secs(300),
        jitter: true,
    };

    /// The gateway's outbox for the push server and hooks: 1 s, 2 s, 4 s … up to 5 minutes (each plus up to as
    /// much again at random), for as many rounds as the worker allows.
    pub const OUTBOX: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(300),
        factor: 2.0,
        max_retry_after: Duration::from_secs(300),
        jitter: true,
    };

    /// A gateway request asking the same upstream deployment again: 50 ms doubling, jittered up to twice the
    /// wait, so at most 1 s.
    pub const UPSTREAM: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(500),
        factor: 2.0,
        max_retry_after: Duration::from_secs(1),
        jitter: true,
    };

    /// `svc-notify`'s short bounded retry of the push server: 250 ms, 500 ms …, at most 2 s each.
    pub const PUSH_CLI: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_millis(250),
        max_delay: Duration::from_secs(2),
        factor: 2.0,
        max_retry_after: Duration::from_secs(2),
        jitter: true,
    };

    /// `svc-notify`'s webhook retries: 250 ms, 500 ms, 1 s … at most 2 s each (`Retry-After` up to 5 s), so a
    /// command with `retry: 3` finishes within a few seconds.
    pub const WEBHOOK_CLI: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_millis(250),
        max_delay: Duration::from_secs(2),
        factor: 2.0,
        max_retry_after: Duration::from_secs(5),
        jitter: true,
    };

    /// The same policy with other bounds (tests, command-line front ends).
    pub fn with_delays(self, min_delay: Duration, max_delay: Duration) -> RetryPolicy {
        RetryPolicy { min_delay, max_delay, ..self }
    }

    /// The waits of this policy one after another, without end: for a loop that decides by itself when to try
    /// again (the gateway's spend writer).
    pub fn delays(&self) -> impl Iterator<Item = Duration> {
        self.backoff(u32::MAX).build()
    }

    /// The wait before attempt `attempt` (the first attempt is 1 and has none): the policy's backoff step for
    /// it, or the server's `Retry-After` (capped by `max_retry_after`) when it asked for one. For a caller that
    /// schedules attempts itself, such as the outbox worker, which keeps the time of the next attempt in the
    /// store.
    pub fn delay_before(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let planned = self.backoff(u32::MAX).build().nth((attempt - 2) as usize).unwrap_or(self.max_delay);
        self.honour(planned, retry_after)
    }

    /// A planned wait, replaced by the server's `Retry-After` (up to `max_retry_after`) when it sent one.
    fn honour(&self, planned: Duration, retry_after: Option<Duration>) -> Duration {
        retry_after.map_or(planned, |ra| ra.min(self.max_retry_after))
    }

    // The one place waits are built (clippy.toml bans other backoff builders).
    #[allow(clippy::disallowed_methods)]
    fn backoff(&self, retries: u32) -> ExponentialBuilder {
        let b = ExponentialBuilder::new()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_factor(self.factor)
            .with_max_times(retries as usize);
        if self.jitter {
            b.with_jitter()
        } else {
            b
        }
    }

    /// Runs `attempt` once, then up to `retries` more times while it fails with a transient error.
    /// `on_retry` is told each failure that will be retried and the wait before the next attempt.
    pub async fn run<T, E, F, Fut>(
        &self,
        retries: u32,
        attempt: F,
        mut on_retry: impl FnMut(&E, Duration),
    ) -> Result<T, E>
    where
        E: Transient,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        attempt
            .retry(self.backoff(retries))
            .when(|e: &E| e.is_transient())
            // backon passes `None` once the retries are used up; keep it so, otherwise prefer the server's wait.
            .adjust(|e: &E, planned| planned.map(|d| self.honour(d, e.retry_after())))
            .notify(|e: &E, wait| on_retry(e, wait))
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum E {
        Transient,
        After(u64),
        Permanent,
    }

    impl Transient for E {
        fn is_transient(&self) -> bool {
            !matches!(self, E::Permanent)
        }
        fn retry_after(&self) -> Option<Duration> {
            match self {
                E::After(s) => Some(Duration::from_secs(*s)),
                _ => None,
            }
        }
    }

    const POLICY: RetryPolicy = RetryPolicy {
        min_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(8),
        factor: 2.0,
        max_retry_after: Duration::from_secs(30),
        jitter: false,
    };

    /// Runs a scripted sequence of results and returns (result, offsets of every attempt from the start).
    async fn script(policy: RetryPolicy, retries: u32, results: Vec<Result<(), E>>) -> (Result<(), E>, Vec<u64>) {
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let results = Arc::new(Mutex::new(results.into_iter()));
        let out = policy
            .run(
                retries,
                || {
                    let seen = seen.clone();
                    let results = results.clone();
                    async move {
                        seen.lock().unwrap().push(start.elapsed().as_millis() as u64);
                        results.lock().unwrap().next().unwrap_or(Ok(()))
                    }
                },
                |_, _| {},
            )
            .await;
        let seen = seen.lock().unwrap().clone();
        (out, seen)
    }

    #[tokio::test(start_paused = true)]
    async fn exponential_waits_then_success() {
        let (out, at) = script(POLICY, 5, vec![Err(E::Transient), Err(E::Transient), Err(E::Transient)]).await;
        assert_eq!(out, Ok(()));
        assert_eq!(at, vec![0, 1000, 3000, 7000]);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_bounded() {
        let (out, at) = script(POLICY, 2, vec![Err(E::Transient); 10]).await;
        assert_eq!(out, Err(E::Transient));
        assert_eq!(at.len(), 3, "one attempt + two retries");
        let (out, at) = script(POLICY, 0, vec![Err(E::Transient)]).await;
        assert_eq!((out, at.len()), (Err(E::Transient), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let (out, at) = script(POLICY, 5, vec![Err(E::Permanent)]).await;
        assert_eq!((out, at), (Err(E::Permanent), vec![0]));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured_and_capped() {
        let (_, at) = script(POLICY, 5, vec![Err(E::After(20)), Err(E::After(3600))]).await;
        assert_eq!(at, vec![0, 20_000, 50_000]);
    }

    #[test]
    fn delay_before_each_attempt() {
        let waits: Vec<u64> = (1..=7).map(|n| POLICY.delay_before(n, None).as_millis() as u64).collect();
        assert_eq!(waits, vec![0, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(POLICY.delay_before(3, Some(Duration::from_secs(20))), Duration::from_secs(20));
        assert_eq!(POLICY.delay_before(3, Some(Duration::from_secs(3600))), Duration::from_secs(30), "capped");
        assert_eq!(POLICY.delay_before(200, None), Duration::from_secs(8));
        let jittered = RetryPolicy { jitter: true, ..POLICY };
        for _ in 0..50 {
            let d = jittered.delay_before(3, None);
            assert!(d >= Duration::from_secs(2) && d <= Duration::from_secs(4), "{d:?}");
        }
        let w = RetryPolicy::WEBHOOK;
        assert!(w.delay_before(2, None) >= Duration::from_secs(1) && w.delay_before(2, None) <= Duration::from_secs(2));
        assert_eq!(w.delay_before(2, Some(Duration::from_secs(900))), Duration::from_secs(300), "5 minutes at most");
    }

    #[tokio::test(start_paused = true)]
    async fn max_delay_caps_growth_and_jitter_stays_within_bounds() {
        let (_, at) = script(POLICY, 6, vec![Err(E::Transient); 6]).await;
        assert_eq!(at, vec![0, 1000, 3000, 7000, 15000, 23000, 31000]);
        let jittered = RetryPolicy { jitter: true, ..POLICY };
        let (_, at) = script(jittered, 3, vec![Err(E::Transient); 3]).await;
        let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (gap, base) in gaps.iter().zip([1000u64, 2000, 4000]) {
            assert!(*gap >= base && *gap <= 2 * base, "gap {gap} for base {base}");
        }
    }
}
