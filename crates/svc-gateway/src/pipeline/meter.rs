//! Metering: which token counts a call is charged for. An upstream's `usage` is believed only when it is
//! well-formed and plausible for the request; otherwise the gateway's conservative estimate
//! (`svc_providers::estimate`) takes its place and the upstream is logged as at fault.
//!
//! - Missing usage (the upstream does not count): the estimate, no fault.
//! - Malformed usage (`{}`, negative, fractional or text counts): the estimate, a fault.
//! - Prompt tokens above what the request could produce (`estimate::prompt_bound`): the prompt estimate, a
//!   fault. Completion tokens above the cap the upstream was given (`max_tokens` times `n`; without a cap,
//!   the largest a request may ask for): the completion estimate, a fault.
//!
//! What this file does not do: price usage or cap a charge at the reservation (settlement does both), or cut
//! a stream (the stream stage does, at [`Meter::cut_after`]).

use svc_budget::Usage;
use svc_providers::usage::Reported;
use svc_providers::MAX_COMPLETION_TOKENS;

/// What the gateway knows of a request for metering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    /// The conservative prompt estimate (what was reserved for the prompt).
    pub prompt_estimate: u64,
    /// The most prompt tokens the request could cost.
    pub prompt_bound: u64,
    /// The completion cap per choice the reservation pays for.
    pub completion_cap: u64,
    /// The completion cap per choice the upstream was told (`max_tokens`), when it was told one.
    pub upstream_cap: Option<u64>,
    /// `n`.
    pub choices: u64,
    /// Whether a budget holds a reservation for the request (then a stream is cut at the cap).
    pub budgeted: bool,
}

/// The counts to charge, and why the upstream's own were not believed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metered {
    /// The counts.
    pub usage: Usage,
    /// Whether these are the upstream's counts as reported (else the client is shown these instead).
    pub as_reported: bool,
    /// What was wrong with the upstream's counts, when something was (a provider fault, logged).
    pub fault: Option<String>,
}

impl Meter {
    /// The reserved completion tokens of all choices.
    pub fn completion_limit(&self) -> u64 {
        self.completion_cap.saturating_mul(self.choices.max(1))
    }

    /// The counts to charge for what the upstream `reported`, with `completion_estimate` (the conservative
    /// estimate of what it generated; computed only when needed) in place of a count that cannot be believed.
    pub fn judge(&self, reported: Reported, completion_estimate: impl FnOnce() -> u64) -> Metered {
        if let Reported::Counts(u) = reported {
            if u.prompt_tokens <= self.prompt_bound && u.completion_tokens <= self.completion_bound() {
                return Metered { usage: u, as_reported: true, fault: None };
            }
        }
        let estimate = Usage {
            prompt_tokens: self.prompt_estimate,
            completion_tokens: completion_estimate().min(self.completion_bound()),
            ..Usage::default()
        };
        match reported {
            Reported::Missing => Metered { usage: estimate, as_reported: false, fault: None },
            Reported::Malformed(why) => {
                Metered { usage: estimate, as_reported: false, fault: Some(format!("malformed usage: {why}")) }
            }
            Reported::Counts(u) => {
                let mut usage = u;
                let mut faults = Vec::new();
                if u.prompt_tokens > self.prompt_bound {
                    faults.push(format!(
                        "{} prompt tokens reported for a request that could cost at most {}",
                        u.prompt_tokens, self.prompt_bound
                    ));
                    usage.prompt_tokens = estimate.prompt_tokens;
                }
                if u.completion_tokens > self.completion_bound() {
                    faults.push(format!(
                        "{} completion tokens reported beyond the cap of {}",
                        u.completion_tokens,
                        self.completion_bound()
                    ));
                    usage.completion_tokens = estimate.completion_tokens;
                }
                let fault = (!faults.is_empty()).then(|| faults.join("; "));
                Metered { usage, as_reported: fault.is_none(), fault }
            }
        }
    }

    /// The estimated generated tokens (by [`svc_providers::estimate::text_tokens`], not doubled) past which a
    /// budgeted stream is cut: its reserved completion tokens and a quarter more, so a stream that keeps to
    /// its cap is never cut by a count that runs a little high, and one that ignores it stops soon after.
    pub fn cut_after(&self) -> Option<u64> {
        let limit = self.completion_limit();
        self.budgeted.then(|| limit.saturating_add(limit / 4).saturating_add(16))
    }

    /// The most completion tokens believed: what the upstream was told, else the largest cap a request may ask.
    fn completion_bound(&self) -> u64 {
        self.upstream_cap.unwrap_or(MAX_COMPLETION_TOKENS).saturating_mul(self.choices.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METER: Meter = Meter {
        prompt_estimate: 100,
        prompt_bound: 5_000,
        completion_cap: 50,
        upstream_cap: Some(50),
        choices: 2,
        budgeted: true,
    };

    fn counts(p: u64, c: u64) -> Reported {
        Reported::Counts(Usage { prompt_tokens: p, completion_tokens: c, ..Usage::default() })
    }

    #[test]
    fn believable_counts_are_charged_as_reported() {
        let m = METER.judge(counts(40, 100), || 7);
        assert_eq!(
            (m.usage, m.as_reported, m.fault),
            (Usage { prompt_tokens: 40, completion_tokens: 100, ..Usage::default() }, true, None)
        );
    }

    #[test]
    fn missing_and_malformed_counts_are_estimated() {
        let m = METER.judge(Reported::Missing, || 30);
        assert_eq!((m.usage, m.fault), (Usage { prompt_tokens: 100, completion_tokens: 30, ..Usage::default() }, None));
        let m = METER.judge(Reported::Malformed("`usage.prompt_tokens` is missing".into()), || 300);
        assert_eq!(
            m.usage,
            Usage { prompt_tokens: 100, completion_tokens: 100, ..Usage::default() },
            "estimate capped at n × cap"
        );
        assert!(m.fault.is_some_and(|f| f.contains("malformed")));
    }

    #[test]
    fn absurd_counts_are_replaced_one_by_one() {
        let m = METER.judge(counts(40, u64::MAX), || 12);
        assert_eq!(m.usage, Usage { prompt_tokens: 40, completion_tokens: 12, ..Usage::default() });
        let m = METER.judge(counts(1 << 40, 3), || 12);
        assert_eq!(m.usage, Usage { prompt_tokens: 100, completion_tokens: 3, ..Usage::default() });
        assert!(!m.as_reported && m.fault.is_some());
        let uncapped = Meter { upstream_cap: None, ..METER };
        assert!(uncapped.judge(counts(40, 10_000), || 1).fault.is_none(), "no cap told: a long answer is believed");
    }

    #[test]
    fn budgeted_streams_are_cut_a_quarter_past_the_cap() {
        assert_eq!(METER.cut_after(), Some(100 + 25 + 16));
        assert_eq!(Meter { budgeted: false, ..METER }.cut_after(), None);
    }
}
