//! A budget [`Account`]: the admission state of one budget (a team's or a key's) in its current period.
//!
//! Admission reserves a request's worst-case cost before the call and settles it with the actual cost
//! after, so concurrent requests can never together pass the limit: a request is admitted only if
//! `spent + reserved + its reservation ≤ limit`. Periods roll over when an operation sees an instant past
//! the period's end; spend starts at zero then, reservations in flight carry over (they settle into the
//! period in which they finish, as their spend records do).

use crate::{BudgetDuration, Money, Period};
use chrono::{DateTime, Utc};

/// One budget's state.
#[derive(Debug, Clone)]
pub struct Account {
    /// The cap per period.
    pub limit: Money,
    /// Period length.
    pub duration: BudgetDuration,
    /// Periods repeat from here.
    pub anchor: DateTime<Utc>,
    /// The current period.
    pub period: Period,
    /// Settled spend in the current period.
    pub spent: Money,
    /// Reservations of requests in flight.
    pub reserved: Money,
    /// Alert thresholds (per-mille) already announced this period.
    alerted: Vec<u32>,
    /// Whether `budget.exceeded` was announced this period.
    exceeded_announced: bool,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The cap.
    pub limit: Money,
    /// Settled spend this period.
    pub spent: Money,
    /// Reserved by requests in flight.
    pub reserved: Money,
    /// The refused request's worst-case cost (what did not fit).
    pub requested: Money,
    /// When the period resets.
    pub reset: DateTime<Utc>,
    /// Whether this is the first refusal of the period (announce `budget.exceeded`).
    pub first_of_period: bool,
}

/// Something to announce after a settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Spend crossed this fraction (per-mille) of the limit.
    Alert { threshold_permille: u32, spent: Money, limit: Money, period: Period },
    /// Spend reached the limit, or a request was refused (`requested`: its worst-case cost).
    Exceeded { spent: Money, limit: Money, period: Period, requested: Option<Money> },
}

impl Account {
    /// An account whose current period (at `now`) already holds `spent`.
    pub fn new(
        limit: Money,
        duration: BudgetDuration,
        anchor: DateTime<Utc>,
        spent: Money,
        now: DateTime<Utc>,
    ) -> Account {
        Account {
            limit,
            duration,
            anchor,
            period: duration.period_at(anchor, now),
            spent,
            reserved: Money::ZERO,
            alerted: Vec::new(),
            exceeded_announced: false,
        }
    }

    /// Marks notices already announced this period (from the store, after a restart).
    pub fn restore_notices(&mut self, alerted: &[u32], exceeded: bool) {
        self.alerted.extend_from_slice(alerted);
        self.exceeded_announced |= exceeded;
    }

    /// Moves to the period containing `now` when the current one has ended.
    pub fn roll(&mut self, now: DateTime<Utc>) {
        if now >= self.period.end {
            self.period = self.duration.period_at(self.anchor, now);
            self.spent = Money::ZERO;
            self.alerted.clear();
            self.exceeded_announced = false;
        }
    }

    /// Whether `amount` more fits under the limit now.
    pub fn check(&mut self, amount: Money, now: DateTime<Utc>) -> Result<(), Refusal> {
        self.roll(now);
        if self.spent.plus(self.reserved).plus(amount) <= self.limit {
            return Ok(());
        }
        let first = !self.exceeded_announced;
        self.exceeded_announced = true;
        Err(Refusal {
            limit: self.limit,
            spent: self.spent,
            reserved: self.reserved,
            requested: amount,
            reset: self.period.end,
            first_of_period: first,
        })
    }

    /// Holds `amount` for a request in flight (after [`Account::check`] passed under the same lock).
    pub fn hold(&mut self, amount: Money) {
        self.reserved = self.reserved.plus(amount);
    }

    /// Replaces a reservation by the actual cost; returns what to announce.
    pub fn settle(&mut self, reserved: Money, actual: Money, thresholds: &[u32], now: DateTime<Utc>) -> Vec<Notice> {
        self.release(reserved);
        self.roll(now);
        self.spent = self.spent.plus(actual);
        let mut out = Vec::new();
        if self.limit.0 <= 0 {
            return out;
        }
        for &t in thresholds {
            let line = Money((self.limit.0 as i128 * t as i128 / 1000) as i64);
            if self.spent >= line && !self.alerted.contains(&t) && t < 1000 {
                self.alerted.push(t);
                out.push(Notice::Alert {
                    threshold_permille: t,
                    spent: self.spent,
                    limit: self.limit,
                    period: self.period,
                });
            }
        }
        if self.spent >= self.limit && !self.exceeded_announced {
            self.exceeded_announced = true;
            out.push(Notice::Exceeded { spent: self.spent, limit: self.limit, period: self.period, requested: None });
        }
        out
    }

    /// Drops a reservation without spending (the call failed before any tokens).
    pub fn release(&mut self, reserved: Money) {
        self.reserved = self.reserved.minus(reserved);
        if self.reserved.0 < 0 {
            self.reserved = Money::ZERO;
        }
    }

    /// Changes the limit (config reload) without touching spend.
    pub fn set_limit(&mut self, limit: Money) {
        self.limit = limit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, h, 0, 0).single().unwrap_or_default()
    }

    #[test]
    fn reservations_bound_concurrent_spend() {
        let mut a = Account::new(Money(100), BudgetDuration::Seconds(86_400), t(0), Money::ZERO, t(1));
        for _ in 0..4 {
            assert!(a.check(Money(25), t(1)).is_ok());
            a.hold(Money(25));
        }
        let refused = a.check(Money(1), t(1)).err();
        assert_eq!(refused.as_ref().map(|r| (r.reserved, r.first_of_period)), Some((Money(100), true)));
        assert_eq!(a.check(Money(1), t(1)).err().map(|r| r.first_of_period), Some(false));
        // Actual costs lower than reserved free room.
        a.settle(Money(25), Money(10), &[], t(1));
        assert!(a.check(Money(15), t(1)).is_ok());
        assert_eq!((a.spent, a.reserved), (Money(10), Money(75)));
    }

    #[test]
    fn alerts_once_per_threshold_and_exceeded_once_per_period() {
        let mut a = Account::new(Money(1000), BudgetDuration::Seconds(3600), t(0), Money::ZERO, t(0));
        let th = [500, 800];
        assert_eq!(a.settle(Money::ZERO, Money(400), &th, t(0)), vec![]);
        let n = a.settle(Money::ZERO, Money(450), &th, t(0));
        assert_eq!(n.len(), 2, "crossing two thresholds at once announces both: {n:?}");
        assert_eq!(a.settle(Money::ZERO, Money(10), &th, t(0)), vec![]);
        let n = a.settle(Money::ZERO, Money(200), &th, t(0));
        assert!(matches!(n.as_slice(), [Notice::Exceeded { .. }]));
        assert!(a.check(Money(1), t(0)).err().is_some_and(|r| !r.first_of_period));
        // Next period: fresh.
        assert!(a.check(Money(1), t(1)).is_ok());
        assert_eq!(a.spent, Money::ZERO);
        assert_eq!(a.settle(Money::ZERO, Money(600), &th, t(1)).len(), 1);
    }

    #[test]
    fn reservations_carry_over_a_reset() {
        let mut a = Account::new(Money(100), BudgetDuration::Seconds(3600), t(0), Money(90), t(0));
        assert!(a.check(Money(20), t(0)).is_err());
        assert!(a.check(Money(5), t(0)).is_ok());
        a.hold(Money(5));
        a.roll(t(1));
        assert_eq!((a.spent, a.reserved), (Money::ZERO, Money(5)));
        a.settle(Money(5), Money(4), &[], t(1));
        assert_eq!((a.spent, a.reserved), (Money(4), Money::ZERO));
    }
}
