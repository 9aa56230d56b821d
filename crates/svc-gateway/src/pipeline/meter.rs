//! Metering: which token counts a call is charged for, and what it is charged. The provider's usage is its
//! bill: its counts are believed as reported, whatever the request's body held (a provider bills state it
//! keeps, input it adds itself, and tiers the body does not show). Only counts no real call can produce are
//! not believed: malformed ones (`{}`, negative, fractional or text), input above the model's context window
//! (`max_input_tokens`, else [`UNKNOWN_CONTEXT`]), output above the model's output cap times `n` (else the cap
//! the upstream was told), tool uses above [`MAX_TOOL_USES`].
//!
//! What a call is charged ([`charge`]):
//! - believed counts: their bill, part by part. A bill above the reservation (its bound was too low) is charged
//!   as billed and flagged (`over_reservation`: a log line and a metric), never cut: the flag is how a wrong
//!   bound gets found;
//! - no counts at all (the upstream does not count): the conservative estimate's bill, never above the
//!   reservation;
//! - counts that cannot be right: the reservation, the most the call could legitimately cost (unbudgeted: the
//!   estimate's bill), flagged.
//!
//! What this file does not do: price usage (`svc_budget::Prices`), settle budgets (settlement does), or cut a
//! stream (the stream stage does, at [`Meter::cut_after`]).

use svc_budget::{Cost, Money, Usage};
use svc_providers::usage::Reported;
use svc_providers::MAX_COMPLETION_TOKENS;

/// The context window assumed for a model without `max_input_tokens`: more input than any model takes.
pub const UNKNOWN_CONTEXT: u64 = 10_000_000;
/// The most server-side tool uses (web searches) believed of one call.
pub const MAX_TOOL_USES: u64 = 10_000;

/// What the gateway knows of a request for metering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meter {
    /// The conservative prompt estimate (what was reserved for the prompt).
    pub prompt_estimate: u64,
    /// The most input tokens a call can be billed: the model's context window.
    pub input_bound: u64,
    /// The completion cap per choice the reservation pays for.
    pub completion_cap: u64,
    /// The completion cap per choice the upstream was told (`max_tokens`), when it was told one.
    pub upstream_cap: Option<u64>,
    /// The model's own completion cap (`max_output_tokens`), when configured.
    pub model_cap: Option<u64>,
    /// `n`.
    pub choices: u64,
    /// Whether a budget holds a reservation for the request (then a stream is cut at the cap).
    pub budgeted: bool,
}

/// How the counts of a call were arrived at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The upstream's own counts, believed: its bill.
    Billed,
    /// The upstream reported no usage: the gateway's conservative estimate.
    Estimated,
    /// The upstream's counts cannot be right: the call is charged its reservation.
    Unbelievable,
}

/// The counts to charge and show, and why the upstream's own were not believed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metered {
    /// The counts (the upstream's when believed, else the estimate).
    pub usage: Usage,
    /// How they were arrived at.
    pub basis: Basis,
    /// What was wrong with the upstream's counts, when something was (a provider fault, logged).
    pub fault: Option<String>,
}

impl Metered {
    /// Whether these are the upstream's counts as reported (else the client is shown these instead).
    pub fn as_reported(&self) -> bool {
        self.basis == Basis::Billed
    }
}

/// On what a spend record's cost rests (stored with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeBasis {
    /// The provider's bill.
    Billed,
    /// The provider's bill, above what was reserved for the call (flagged: a bound was too low).
    OverReservation,
    /// The gateway's estimate (the upstream reported no usage).
    Estimated,
    /// The call's reservation (the upstream's counts could not be right, or a stream ran past its cap).
    Reservation,
}

impl ChargeBasis {
    /// As stored and shown (`/spend/logs` `basis`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChargeBasis::Billed => "billed",
            ChargeBasis::OverReservation => "over_reservation",
            ChargeBasis::Estimated => "estimated",
            ChargeBasis::Reservation => "reservation",
        }
    }
}

/// What a call whose counts came out as `basis` and cost `bill` is charged, part by part, when a budget holds
/// `held` for it (`None`: no budget). The parts always add up to the charge; the charge is above `held` only
/// when it is flagged [`ChargeBasis::OverReservation`].
pub fn charge(bill: Cost, basis: Basis, held: Option<Money>) -> (Cost, ChargeBasis) {
    match (basis, held) {
        (Basis::Billed, Some(h)) if bill.total() > h => (bill, ChargeBasis::OverReservation),
        (Basis::Billed, _) => (bill, ChargeBasis::Billed),
        (Basis::Estimated, Some(h)) if bill.total() > h => (bill.scaled_to(h), ChargeBasis::Estimated),
        (Basis::Estimated, _) => (bill, ChargeBasis::Estimated),
        (Basis::Unbelievable, Some(h)) => (bill.scaled_to(h), ChargeBasis::Reservation),
        (Basis::Unbelievable, None) => (bill, ChargeBasis::Reservation),
    }
}

impl Meter {
    /// The reserved completion tokens of all choices.
    pub fn completion_limit(&self) -> u64 {
        self.completion_cap.saturating_mul(self.choices.max(1))
    }

    /// The counts to charge for what the upstream `reported`, with `completion_estimate` (the conservative
    /// estimate of what it generated; computed only when needed) in place of counts that cannot be believed.
    pub fn judge(&self, reported: Reported, completion_estimate: impl FnOnce() -> u64) -> Metered {
        let estimate = |completion: u64| Usage {
            prompt_tokens: self.prompt_estimate,
            completion_tokens: completion.min(self.completion_bound()),
            ..Usage::default()
        };
        match reported {
            Reported::Counts(u) => match self.impossible(&u) {
                None => Metered { usage: u, basis: Basis::Billed, fault: None },
                Some(why) => {
                    Metered { usage: estimate(completion_estimate()), basis: Basis::Unbelievable, fault: Some(why) }
                }
            },
            Reported::Missing => {
                Metered { usage: estimate(completion_estimate()), basis: Basis::Estimated, fault: None }
            }
            Reported::Malformed(why) => Metered {
                usage: estimate(completion_estimate()),
                basis: Basis::Unbelievable,
                fault: Some(format!("malformed usage: {why}")),
            },
        }
    }

    /// Why counts `u` cannot be right, when they cannot.
    fn impossible(&self, u: &Usage) -> Option<String> {
        let mut faults = Vec::new();
        if u.prompt_tokens > self.input_bound {
            faults.push(format!(
                "{} input tokens reported, above the model's context window of {}",
                u.prompt_tokens, self.input_bound
            ));
        }
        if u.completion_tokens > self.completion_bound() {
            faults.push(format!(
                "{} output tokens reported, above the {} the call could write",
                u.completion_tokens,
                self.completion_bound()
            ));
        }
        if u.tool_uses > MAX_TOOL_USES {
            faults.push(format!("{} tool uses reported, above {MAX_TOOL_USES}", u.tool_uses));
        }
        (!faults.is_empty()).then(|| faults.join("; "))
    }

    /// The estimated generated tokens (by [`svc_providers::estimate::text_tokens`], not doubled) past which a
    /// budgeted stream is cut: its reserved completion tokens and a quarter more, so a stream that keeps to
    /// its cap is never cut by a count that runs a little high, and one that ignores it stops soon after.
    pub fn cut_after(&self) -> Option<u64> {
        let limit = self.completion_limit();
        self.budgeted.then(|| limit.saturating_add(limit / 4).saturating_add(16))
    }

    /// The most output tokens believed: the model's cap, else what the upstream was told, else the largest cap
    /// a request may ask; times `n`.
    fn completion_bound(&self) -> u64 {
        let cap = self.model_cap.or(self.upstream_cap).unwrap_or(MAX_COMPLETION_TOKENS);
        cap.saturating_mul(self.choices.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use svc_budget::{Price, Prices};

    const METER: Meter = Meter {
        prompt_estimate: 100,
        input_bound: 200_000,
        completion_cap: 50,
        upstream_cap: Some(50),
        model_cap: None,
        choices: 2,
        budgeted: true,
    };

    fn counts(p: u64, c: u64) -> Reported {
        Reported::Counts(Usage { prompt_tokens: p, completion_tokens: c, ..Usage::default() })
    }

    #[test]
    fn the_providers_counts_are_its_bill_whatever_the_body_held() {
        // 1,234 input tokens for a request the gateway estimated at 100: a tool-use system prompt, say.
        let m = METER.judge(counts(1_234, 100), || 7);
        assert!(m.as_reported());
        assert_eq!((m.usage, m.basis, m.fault), (counts_usage(1_234, 100), Basis::Billed, None));
    }

    fn counts_usage(p: u64, c: u64) -> Usage {
        Usage { prompt_tokens: p, completion_tokens: c, ..Usage::default() }
    }

    #[test]
    fn missing_and_malformed_counts_are_estimated() {
        let m = METER.judge(Reported::Missing, || 30);
        assert_eq!((m.usage, m.basis, m.fault), (counts_usage(100, 30), Basis::Estimated, None));
        let m = METER.judge(Reported::Malformed("`usage.prompt_tokens` is missing".into()), || 300);
        assert_eq!(m.usage, counts_usage(100, 100), "estimate capped at n × cap");
        assert_eq!(m.basis, Basis::Unbelievable);
        assert!(m.fault.is_some_and(|f| f.contains("malformed")));
    }

    #[test]
    fn only_counts_no_call_can_produce_are_not_believed() {
        let m = METER.judge(counts(200_001, 3), || 12);
        assert_eq!((m.usage, m.basis), (counts_usage(100, 12), Basis::Unbelievable));
        assert!(m.fault.is_some_and(|f| f.contains("context window")));
        assert_eq!(METER.judge(counts(200_000, 100), || 1).basis, Basis::Billed, "the window itself");
        assert_eq!(METER.judge(counts(40, 101), || 1).basis, Basis::Unbelievable, "past the told cap × n");
        let model = Meter { model_cap: Some(32_000), ..METER };
        assert_eq!(model.judge(counts(40, 64_000), || 1).basis, Basis::Billed, "the model's cap × n");
        assert_eq!(model.judge(counts(40, 64_001), || 1).basis, Basis::Unbelievable);
        let uncapped = Meter { upstream_cap: None, ..METER };
        assert_eq!(uncapped.judge(counts(40, 10_000), || 1).basis, Basis::Billed, "no cap: a long answer");
        let tools = Reported::Counts(Usage { tool_uses: MAX_TOOL_USES + 1, ..counts_usage(1, 1) });
        assert_eq!(METER.judge(tools, || 1).basis, Basis::Unbelievable);
    }

    #[test]
    fn budgeted_streams_are_cut_a_quarter_past_the_cap() {
        assert_eq!(METER.cut_after(), Some(100 + 25 + 16));
        assert_eq!(Meter { budgeted: false, ..METER }.cut_after(), None);
    }

    fn cost(nanos: [i64; 5]) -> Cost {
        let m = Money::from_nanos;
        Cost {
            input: m(nanos[0]),
            output: m(nanos[1]),
            cache_read: m(nanos[2]),
            cache_write: m(nanos[3]),
            tools: m(nanos[4]),
        }
    }

    #[test]
    fn a_bill_above_its_reservation_is_charged_and_flagged_an_unbelievable_one_is_charged_the_reservation() {
        let bill = cost([600, 300, 0, 100, 0]);
        let held = Some(Money::from_nanos(500));
        assert_eq!(charge(bill, Basis::Billed, held), (bill, ChargeBasis::OverReservation));
        assert_eq!(charge(bill, Basis::Billed, Some(Money::from_nanos(1_000))), (bill, ChargeBasis::Billed));
        assert_eq!(charge(bill, Basis::Billed, None), (bill, ChargeBasis::Billed));
        let (c, basis) = charge(bill, Basis::Unbelievable, held);
        assert_eq!((c.total(), basis), (Money::from_nanos(500), ChargeBasis::Reservation));
        let (c, basis) = charge(bill, Basis::Estimated, held);
        assert_eq!((c.total(), basis), (Money::from_nanos(500), ChargeBasis::Estimated));
        let (c, _) = charge(cost([1, 0, 0, 0, 0]), Basis::Unbelievable, held);
        assert_eq!(c.total(), Money::from_nanos(500), "the reservation, even above the estimate's bill");
    }

    proptest! {
        /// For any usage, prices and reservation: the parts of what is charged add up to it, and it is above the
        /// reservation only when flagged as over it.
        #[test]
        fn charged_parts_add_up_and_stay_within_the_reservation_unless_flagged(
            prompt in 0u64..5_000_000, completion in 0u64..500_000, read in 0u64..5_000_000,
            written in 0u64..5_000_000, hour in 0u64..5_000_000, tools in 0u64..100,
            prices in proptest::array::uniform6(0i64..50_000_000), held in proptest::option::of(0i64..100_000_000_000),
            basis in prop_oneof![Just(Basis::Billed), Just(Basis::Estimated), Just(Basis::Unbelievable)],
        ) {
            let p = |i: usize| Price::from_picos(prices[i]);
            let prices = Prices {
                input: p(0), output: p(1), cache_read: Some(p(2)), cache_write: Some(p(3)), cache_write_1h: Some(p(4)),
                long: None, per_tool_use: Money::from_nanos(prices[5]),
            };
            let usage = Usage {
                prompt_tokens: prompt, completion_tokens: completion, cache_read_tokens: read,
                cache_creation_tokens: written, cache_creation_1h_tokens: hour, tool_uses: tools,
            };
            let bill = usage.bill(&prices);
            let held = held.map(Money::from_nanos);
            let (charged, flag) = charge(bill, basis, held);
            let parts = [charged.input, charged.output, charged.cache_read, charged.cache_write, charged.tools];
            prop_assert_eq!(parts.iter().fold(Money::ZERO, |a, b| a.plus(*b)), charged.total());
            prop_assert!(parts.iter().all(|p| *p >= Money::ZERO));
            if let Some(h) = held {
                prop_assert!(charged.total() <= h || flag == ChargeBasis::OverReservation);
                if basis == Basis::Unbelievable {
                    prop_assert_eq!(charged.total(), h);
                }
            }
            if basis == Basis::Billed {
                prop_assert_eq!(charged, bill, "a bill is charged as billed");
            }
        }
    }
}
