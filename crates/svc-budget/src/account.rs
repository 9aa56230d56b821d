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
    /// This node's share of a budget the fleet shares (`None`: one node, the whole budget is here).
    slice: Option<Slice>,
    /// Fleet mode: the fleet's spend in this period outside this node's slice, as last learned.
    others: Money,
    /// Fleet mode: the period of a slice left behind by a reset, until its lease is ended.
    ended: Option<Period>,
}

/// This node's share of a budget its fleet shares: what the store granted it this period (its lease) and
/// what it spent of that. The store makes sure that the leases of all nodes and the spend of ended leases
/// never pass the limit together; admission here takes only from the slice.
///
/// The slice's *exposure* is what this node may have answered under it and not written: its reservations plus
/// its unwritten spend. Should the node die, the store holds back what it was last told of that (the lease's
/// exposure), so admission never takes the exposure past `exposable`, the most the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// Granted to this node in the current period.
    pub granted: Money,
    /// Spent by this node under it (settled requests).
    pub used: Money,
    /// Of `used`, what is not written to the store yet.
    pub unwritten: Money,
    /// The most the store holds of this node's exposure under the lease (`Money::MAX`: never reported, the store
    /// holds the whole unspent lease).
    pub exposable: Money,
    /// What a report allows beyond the exposure for requests to come before the next one: half of what was
    /// reserved since the last report (a node that dies strands at most this beyond what it may have answered;
    /// a request past it asks the store, [`Account::exposure_wanted`]).
    pub headroom: Money,
    /// Reserved since the last report.
    pub flow: Money,
}

impl Default for Slice {
    fn default() -> Slice {
        Slice {
            granted: Money::ZERO,
            used: Money::ZERO,
            unwritten: Money::ZERO,
            exposable: Money::MAX,
            headroom: Money::ZERO,
            flow: Money::ZERO,
        }
    }
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
    /// What was left: `limit - spent - reserved`, at least zero.
    pub remaining: Money,
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
    /// Spend reached the limit, or a request was refused (`requested`: its worst-case cost; `remaining`: what
    /// was left when it was refused).
    Exceeded { spent: Money, limit: Money, period: Period, requested: Option<Money>, remaining: Option<Money> },
}

/// Which notice, without its figures: what the store records once per budget and period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    /// `budget.alert` at this threshold (per-mille of the limit).
    Alert(u32),
    /// `budget.exceeded`.
    Exceeded,
}

impl NoticeKind {
    /// The stored label: `alert:800`, `exceeded`.
    pub fn label(self) -> String {
        match self {
            NoticeKind::Alert(permille) => format!("alert:{permille}"),
            NoticeKind::Exceeded => "exceeded".to_string(),
        }
    }

    /// Reads a stored label back (`None` for a label this version does not know).
    pub fn parse(label: &str) -> Option<NoticeKind> {
        match label {
            "exceeded" => Some(NoticeKind::Exceeded),
            _ => label.strip_prefix("alert:")?.parse().ok().map(NoticeKind::Alert),
        }
    }
}

impl Notice {
    /// Which notice this is.
    pub fn kind(&self) -> NoticeKind {
        match self {
            Notice::Alert { threshold_permille, .. } => NoticeKind::Alert(*threshold_permille),
            Notice::Exceeded { .. } => NoticeKind::Exceeded,
        }
    }

    /// The budget period it belongs to.
    pub fn period(&self) -> &Period {
        match self {
            Notice::Alert { period, .. } | Notice::Exceeded { period, .. } => period,
        }
    }
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
            slice: None,
            others: Money::ZERO,
            ended: None,
        }
    }

    /// A fleet account: nothing granted yet; the fleet's spend is learned at the first grant.
    pub fn leased(limit: Money, duration: BudgetDuration, anchor: DateTime<Utc>, now: DateTime<Utc>) -> Account {
        let mut a = Account::new(limit, duration, anchor, Money::ZERO, now);
        a.slice = Some(Slice::default());
        a
    }

    /// This node's slice (fleet mode).
    pub fn slice(&self) -> Option<Slice> {
        self.slice
    }

    /// Fleet mode: the store granted `amount` more for the period starting at `period_start` and reports
    /// the period's limit and the fleet's spend outside this node's lease. A grant for a period this account
    /// has left (it reset meanwhile) is not added; returns whether it was.
    pub fn granted(&mut self, period_start: DateTime<Utc>, amount: Money, limit: Money, others: Money) -> bool {
        let Some(slice) = self.slice.as_mut() else { return false };
        if self.period.start != period_start {
            return false;
        }
        slice.granted = slice.granted.plus(amount);
        self.limit = limit;
        self.others = others;
        self.spent = others.plus(slice.used);
        true
    }

    /// Fleet mode: what the slice holds that no request in flight needs (what could be given back).
    pub fn spare(&self) -> Money {
        match &self.slice {
            Some(s) => s.granted.minus(s.used).minus(self.reserved).at_least_zero(),
            None => Money::ZERO,
        }
    }

    /// Fleet mode: gives `amount` of the slice back (at most the spare); returns what was taken off.
    pub fn shed(&mut self, amount: Money) -> Money {
        let amount = amount.min(self.spare());
        if let Some(slice) = self.slice.as_mut() {
            slice.granted = slice.granted.minus(amount);
        }
        amount
    }

    /// Fleet mode: the slice's lease lapsed (not renewed in time): what it had spare is no longer usable.
    pub fn lapse(&mut self) {
        let spare = self.spare();
        if let Some(slice) = self.slice.as_mut() {
            slice.granted = slice.granted.minus(spare);
        }
    }

    /// Fleet mode: the slice's leases were returned (after a lapse): nothing is granted any more, and the spend
    /// not yet written counts against the next grants (it may be charged to them).
    pub fn reset_slice(&mut self) {
        if let Some(slice) = self.slice.as_mut() {
            // The store may still hold the old leases' exposures (their return can fail): keep within them.
            *slice = Slice {
                used: slice.unwritten,
                unwritten: slice.unwritten,
                exposable: slice.exposable,
                ..Slice::default()
            };
        }
    }

    /// Fleet mode: counts spend that was answered but is not yet written to the store.
    pub fn unwritten(&mut self, amount: Money) {
        if let Some(s) = self.slice.as_mut() {
            s.unwritten = s.unwritten.plus(amount);
        }
    }

    /// Fleet mode: spend counted by [`Account::unwritten`] is now written.
    pub fn written(&mut self, amount: Money) {
        if let Some(s) = self.slice.as_mut() {
            s.unwritten = s.unwritten.minus(amount).at_least_zero();
        }
    }

    /// Fleet mode: the period of a slice left behind by a reset (its lease is to be ended), once.
    pub fn take_ended(&mut self) -> Option<Period> {
        self.ended.take()
    }

    /// Marks notices already announced this period (from the store, after a restart).
    pub fn restore_notices(&mut self, announced: &[NoticeKind]) {
        for kind in announced {
            match kind {
                NoticeKind::Alert(t) => self.alerted.push(*t),
                NoticeKind::Exceeded => self.exceeded_announced = true,
            }
        }
    }

    /// Whether `budget.exceeded` was announced this period.
    pub fn exceeded_announced(&self) -> bool {
        self.exceeded_announced
    }

    /// Moves to the period containing `now` when the current one has ended.
    pub fn roll(&mut self, now: DateTime<Utc>) {
        if now >= self.period.end {
            if self.slice.is_some() {
                self.ended = Some(self.period);
                // What was spent is the old lease's; unwritten spend is still written (and charged to it).
                let unwritten = self.slice.map(|s| s.unwritten).unwrap_or(Money::ZERO);
                self.slice = Some(Slice { unwritten, ..Slice::default() });
                self.others = Money::ZERO;
            }
            self.period = self.duration.period_at(self.anchor, now);
            self.spent = Money::ZERO;
            self.alerted.clear();
            self.exceeded_announced = false;
        }
    }

    /// Fleet mode: what the whole fleet has left as this node last saw it (`limit - spent - reserved`), slices
    /// of other nodes included.
    pub fn fleet_room(&mut self, now: DateTime<Utc>) -> Money {
        self.roll(now);
        self.limit.minus(self.spent).minus(self.reserved).at_least_zero()
    }

    /// What is left in the period containing `now`: `limit - spent - reserved`, at least zero; in fleet mode,
    /// no more than the slice has left (`granted - used - reserved`).
    pub fn room(&mut self, now: DateTime<Utc>) -> Money {
        self.roll(now);
        self.room_now()
    }

    fn room_now(&self) -> Money {
        let total = self.limit.minus(self.spent).minus(self.reserved).at_least_zero();
        match &self.slice {
            Some(s) => total
                .min(s.granted.minus(s.used).minus(self.reserved).at_least_zero())
                .min(s.exposable.minus(self.exposure()).at_least_zero()),
            None => total,
        }
    }

    /// Whether `amount` more fits under the limit now.
    pub fn check(&mut self, amount: Money, now: DateTime<Utc>) -> Result<(), Refusal> {
        if amount <= self.room(now) {
            return Ok(());
        }
        Err(self.refuse(amount))
    }

    /// Records that a request of worst-case cost `requested` was refused (after [`Account::room`] said it did
    /// not fit) and describes the refusal. The first refusal of a period is to be announced as
    /// `budget.exceeded`, after the alerts not announced yet (an alert after "exceeded" is noise).
    pub fn refuse(&mut self, requested: Money) -> Refusal {
        let mut refusal = self.describe_refusal(requested);
        refusal.first_of_period = self.mark_exceeded();
        refusal
    }

    /// Describes the refusal of a request of worst-case cost `requested` without recording anything (in fleet
    /// mode a refusal is announced only once the fleet's totals justify it: [`Account::mark_exceeded`] then).
    /// `first_of_period` says whether `budget.exceeded` was still to be announced.
    pub fn describe_refusal(&self, requested: Money) -> Refusal {
        Refusal {
            limit: self.limit,
            spent: self.spent,
            reserved: self.reserved,
            requested,
            remaining: self.room_now(),
            reset: self.period.end,
            first_of_period: !self.exceeded_announced,
        }
    }

    /// Records that `budget.exceeded` is announced this period; returns whether it was not yet (announce it).
    /// The alerts not announced yet are announced before it, so none comes after it.
    pub fn mark_exceeded(&mut self) -> bool {
        !std::mem::replace(&mut self.exceeded_announced, true)
    }

    /// Holds `amount` for a request in flight (after [`Account::check`] passed under the same lock).
    pub fn hold(&mut self, amount: Money) {
        self.reserved = self.reserved.plus(amount);
        if let Some(s) = self.slice.as_mut() {
            s.flow = s.flow.plus(amount);
        }
    }

    /// Replaces a reservation by the actual cost; returns what to announce.
    pub fn settle(&mut self, reserved: Money, actual: Money, thresholds: &[u32], now: DateTime<Utc>) -> Vec<Notice> {
        self.release(reserved);
        self.roll(now);
        self.spent = self.spent.plus(actual.at_least_zero());
        if let Some(slice) = self.slice.as_mut() {
            slice.used = slice.used.plus(actual.at_least_zero());
        }
        let mut out = Vec::new();
        if self.limit <= Money::ZERO {
            return out;
        }
        for &t in thresholds {
            let line = self.limit.permille(t);
            // Once "exceeded" was announced this period, its announcement announced the alerts before it.
            if self.spent >= line && !self.alerted.contains(&t) && t < 1000 && !self.exceeded_announced {
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
            out.push(Notice::Exceeded {
                spent: self.spent,
                limit: self.limit,
                period: self.period,
                requested: None,
                remaining: None,
            });
        }
        out
    }

    /// Drops a reservation without spending (the call failed before any tokens).
    pub fn release(&mut self, reserved: Money) {
        self.reserved = self.reserved.minus(reserved).at_least_zero();
    }

    /// Changes the limit (config reload) without touching spend.
    pub fn set_limit(&mut self, limit: Money) {
        self.limit = limit;
    }
}

#[path = "exposure.rs"]
mod exposure;

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, h, 0, 0).single().unwrap_or_default()
    }

    #[test]
    fn reservations_bound_concurrent_spend() {
        let mut a = Account::new(Money::from_nanos(100), BudgetDuration::Seconds(86_400), t(0), Money::ZERO, t(1));
        for _ in 0..4 {
            assert!(a.check(Money::from_nanos(25), t(1)).is_ok());
            a.hold(Money::from_nanos(25));
        }
        let refused = a.check(Money::from_nanos(1), t(1)).err();
        assert_eq!(refused.as_ref().map(|r| (r.reserved, r.first_of_period)), Some((Money::from_nanos(100), true)));
        assert_eq!(a.check(Money::from_nanos(1), t(1)).err().map(|r| r.first_of_period), Some(false));
        // Actual costs lower than reserved free room.
        a.settle(Money::from_nanos(25), Money::from_nanos(10), &[], t(1));
        assert!(a.check(Money::from_nanos(15), t(1)).is_ok());
        assert_eq!((a.spent, a.reserved), (Money::from_nanos(10), Money::from_nanos(75)));
    }

    #[test]
    fn alerts_once_per_threshold_and_exceeded_once_per_period() {
        let mut a = Account::new(Money::from_nanos(1000), BudgetDuration::Seconds(3600), t(0), Money::ZERO, t(0));
        let th = [500, 800];
        assert_eq!(a.settle(Money::ZERO, Money::from_nanos(400), &th, t(0)), vec![]);
        let n = a.settle(Money::ZERO, Money::from_nanos(450), &th, t(0));
        assert_eq!(n.len(), 2, "crossing two thresholds at once announces both: {n:?}");
        assert_eq!(a.settle(Money::ZERO, Money::from_nanos(10), &th, t(0)), vec![]);
        let n = a.settle(Money::ZERO, Money::from_nanos(200), &th, t(0));
        assert!(matches!(n.as_slice(), [Notice::Exceeded { .. }]));
        assert!(a.check(Money::from_nanos(1), t(0)).err().is_some_and(|r| !r.first_of_period));
        // Next period: fresh.
        assert!(a.check(Money::from_nanos(1), t(1)).is_ok());
        assert_eq!(a.spent, Money::ZERO);
        assert_eq!(a.settle(Money::ZERO, Money::from_nanos(600), &th, t(1)).len(), 1);
    }

    #[test]
    fn a_refusal_is_described_apart_from_being_announced() {
        let mut a = Account::new(Money::from_nanos(1000), BudgetDuration::Seconds(3600), t(0), Money::ZERO, t(0));
        a.hold(Money::from_nanos(900));
        let r = a.describe_refusal(Money::from_nanos(200));
        assert_eq!(
            (r.reserved, r.remaining, r.first_of_period),
            (Money::from_nanos(900), Money::from_nanos(100), true)
        );
        assert!(a.describe_refusal(Money::from_nanos(200)).first_of_period, "describing records nothing");
        assert!(a.mark_exceeded());
        assert!(!a.mark_exceeded(), "once a period");
        assert!(!a.describe_refusal(Money::from_nanos(200)).first_of_period);
        // Settled past 80% after "exceeded": its announcement announced the alerts before it.
        assert_eq!(a.settle(Money::from_nanos(900), Money::from_nanos(850), &[800], t(0)), vec![]);
    }

    #[test]
    fn after_a_refusal_no_alert_comes_from_settlements() {
        let mut a = Account::new(Money::from_nanos(1000), BudgetDuration::Seconds(3600), t(0), Money::ZERO, t(0));
        // A worst case that does not fit while spend is still low: "exceeded" is announced (alerts first) ...
        let r = a.check(Money::from_nanos(2000), t(0)).err();
        assert_eq!(r.as_ref().map(|r| (r.first_of_period, r.remaining)), Some((true, Money::from_nanos(1000))));
        // ... so crossing 80% later announces nothing more.
        assert_eq!(a.settle(Money::ZERO, Money::from_nanos(900), &[800], t(0)), vec![]);
        // Next period: alerts again.
        assert_eq!(a.settle(Money::ZERO, Money::from_nanos(900), &[800], t(1)).len(), 1);
    }

    #[test]
    fn notice_kinds_round_trip_their_labels() {
        for kind in [NoticeKind::Alert(800), NoticeKind::Alert(1), NoticeKind::Exceeded] {
            assert_eq!(NoticeKind::parse(&kind.label()), Some(kind));
        }
        assert_eq!(NoticeKind::parse("alert:x"), None);
        assert_eq!(NoticeKind::parse("other"), None);
    }

    #[test]
    fn a_fleet_account_admits_from_its_slice_only() {
        let mut a = Account::leased(Money::from_nanos(1000), BudgetDuration::Seconds(3600), t(0), t(0));
        assert_eq!(a.room(t(0)), Money::ZERO, "nothing granted yet");
        assert!(a.granted(t(0), Money::from_nanos(300), Money::from_nanos(1000), Money::from_nanos(600)));
        assert_eq!((a.room(t(0)), a.spent), (Money::from_nanos(300), Money::from_nanos(600)));
        a.hold(Money::from_nanos(200));
        assert_eq!((a.room(t(0)), a.spare()), (Money::from_nanos(100), Money::from_nanos(100)));
        // Alerts are judged on the fleet's spend: 600 + 250 crosses 80%.
        let n = a.settle(Money::from_nanos(200), Money::from_nanos(250), &[800], t(0));
        assert!(matches!(n.as_slice(), [Notice::Alert { threshold_permille: 800, .. }]), "{n:?}");
        assert_eq!((a.spent, a.slice().map(|s| s.used)), (Money::from_nanos(850), Some(Money::from_nanos(250))));
        assert_eq!(a.shed(Money::from_nanos(500)), Money::from_nanos(50), "only the spare goes back");
        assert_eq!(a.room(t(0)), Money::ZERO);
        // Unwritten spend is counted until it is written.
        a.unwritten(Money::from_nanos(60));
        a.unwritten(Money::from_nanos(60));
        assert_eq!(a.slice().map(|s| s.unwritten), Some(Money::from_nanos(120)));
        a.written(Money::from_nanos(120));
        assert_eq!(a.slice().map(|s| s.unwritten), Some(Money::ZERO));
    }

    #[test]
    fn a_fleet_account_leaves_its_slice_behind_at_a_reset() {
        let mut a = Account::leased(Money::from_nanos(1000), BudgetDuration::Seconds(3600), t(0), t(0));
        assert!(a.granted(t(0), Money::from_nanos(300), Money::from_nanos(1000), Money::ZERO));
        a.hold(Money::from_nanos(100));
        a.lapse();
        assert_eq!(a.room(t(0)), Money::ZERO, "a lapsed lease admits nothing more");
        assert_eq!(a.room(t(1)), Money::ZERO, "a new period starts with nothing granted");
        assert_eq!(a.take_ended().map(|p| p.start), Some(t(0)));
        assert_eq!(a.take_ended(), None);
        assert!(
            !a.granted(t(0), Money::from_nanos(5), Money::from_nanos(1000), Money::ZERO),
            "a grant of the old period"
        );
        assert!(a.granted(t(1), Money::from_nanos(150), Money::from_nanos(1000), Money::ZERO));
        // The request in flight across the reset counts against the new slice.
        assert_eq!(a.room(t(1)), Money::from_nanos(50));
    }

    #[test]
    fn reservations_carry_over_a_reset() {
        let mut a =
            Account::new(Money::from_nanos(100), BudgetDuration::Seconds(3600), t(0), Money::from_nanos(90), t(0));
        assert!(a.check(Money::from_nanos(20), t(0)).is_err());
        assert!(a.check(Money::from_nanos(5), t(0)).is_ok());
        a.hold(Money::from_nanos(5));
        a.roll(t(1));
        assert_eq!((a.spent, a.reserved), (Money::ZERO, Money::from_nanos(5)));
        a.settle(Money::from_nanos(5), Money::from_nanos(4), &[], t(1));
        assert_eq!((a.spent, a.reserved), (Money::from_nanos(4), Money::ZERO));
    }
}
