//! A fleet account's *exposure*: what its node may have answered under its slice and not written yet, and the
//! ceiling on it that the store holds (see [`Slice`]). A dead node's reclaimed lease holds back only its last
//! reported exposure, so admission never takes the exposure past what the store holds (`Account::room`).

use super::Account;
use crate::Money;

impl Account {
    /// Fleet mode: what this node may have answered under its slice and not written yet (its reservations and
    /// its unwritten spend).
    pub fn exposure(&self) -> Money {
        self.reserved.plus(self.slice.map(|s| s.unwritten).unwrap_or(Money::ZERO))
    }

    /// Fleet mode: the exposure to report to the store (`None` on one node), `written` of the unwritten spend
    /// going to the store with the report (the report counts it as written: it takes effect only with it), plus
    /// the headroom. Lowers the ceiling now, so that nothing admitted until the store takes the report goes past
    /// it; [`Account::exposed`] applies it once it is taken.
    pub fn report_exposure(&mut self, written: Money) -> Option<Money> {
        let exposure = self.exposure();
        let s = self.slice.as_mut()?;
        s.headroom = Money::from_nanos(std::mem::take(&mut s.flow).nanos() / 2);
        let report = exposure.minus(written).at_least_zero().plus(s.headroom);
        s.exposable = s.exposable.min(report.plus(written));
        Some(report)
    }

    /// Fleet mode: a request of worst case `full` would take the exposure past the ceiling: the exposure to
    /// report before it is admitted, or `None` when it fits. What it needs, and as much again as was reserved
    /// since the last report, up to twice the ceiling: a burst asks a few times, not at each request, while a
    /// client that sends one request at a time is given room for that one only (a node that dies then strands
    /// only what it may have answered).
    pub fn exposure_wanted(&self, full: Money) -> Option<Money> {
        let need = self.exposure().plus(full);
        let s = self.slice.as_ref()?;
        (need > s.exposable).then(|| need.max(need.plus(s.flow).min(s.exposable.plus(s.exposable))))
    }

    /// Fleet mode: the exposure to report with a grant when the store may hold none yet (the grant may create
    /// the lease, which would hold back its whole unspent part): room for the exposure, a request of `full` and
    /// the headroom. `None` once reported (or on one node).
    pub fn exposure_at_grant(&mut self, full: Money) -> Option<Money> {
        let need = self.exposure().plus(full);
        let s = self.slice.as_mut()?;
        if s.exposable != Money::MAX {
            return None;
        }
        let report = need.plus(s.headroom);
        s.exposable = report;
        Some(report)
    }

    /// Fleet mode: whether a request of worst case `full` is short only of the exposure the store holds (its
    /// slice has room for it).
    pub fn exposure_binds(&self, full: Money) -> bool {
        self.slice.is_some_and(|s| {
            self.exposure().plus(full) > s.exposable && s.granted.minus(s.used).minus(self.reserved) >= full
        })
    }

    /// Fleet mode: the store took the newest report of the exposure, `report`: admission may use all of it.
    pub fn exposed(&mut self, report: Money) {
        if let Some(s) = self.slice.as_mut() {
            s.exposable = report;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BudgetDuration;
    use chrono::{DateTime, TimeZone, Utc};

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, h, 0, 0).single().unwrap_or_default()
    }

    #[test]
    fn a_fleet_account_admits_no_more_than_the_store_holds_of_its_exposure() {
        let m = Money::from_nanos;
        let mut a = Account::leased(m(1000), BudgetDuration::Seconds(3600), t(0), t(0));
        assert!(a.granted(t(0), m(500), m(1000), Money::ZERO));
        assert_eq!((a.room(t(0)), a.exposure_wanted(m(100))), (m(500), None), "never reported: the whole slice");
        a.hold(m(100));
        a.release(m(100));
        a.hold(m(100));
        a.settle(m(100), m(80), &[], t(0));
        a.unwritten(m(80));
        a.hold(m(50));
        assert_eq!(a.exposure(), m(130));
        // A report with a batch of 80: the 50 in flight, and half as much as was reserved since the last report (a
        // request that failed included). The ceiling is lowered at once (counting the batch until it is written),
        // and applied when the store takes the report.
        assert_eq!(a.report_exposure(m(80)), Some(m(50 + 125)));
        assert_eq!(a.slice().map(|s| s.exposable), Some(m(255)));
        assert_eq!(a.room(t(0)), m(125));
        assert!(a.exposure_binds(m(200)) && !a.exposure_binds(m(100)) && !a.exposure_binds(m(400)));
        a.written(m(80));
        a.exposed(m(175));
        assert_eq!((a.room(t(0)), a.exposure_wanted(m(125))), (m(125), None), "the slice has 370");
        // Past the ceiling: ask the store for what is needed; nothing reserved since the report, nothing more.
        assert_eq!(a.exposure_wanted(m(200)), Some(m(250)));
        // In a burst, what is needed and as much again as was reserved since the report, up to twice the ceiling.
        a.hold(m(20));
        assert_eq!(a.exposure_wanted(m(200)), Some(m(290)));
        a.hold(m(100));
        assert_eq!(a.exposure_wanted(m(100)), Some(m(350)));
        assert_eq!(a.exposure_wanted(m(300)), Some(m(470)));
        a.release(m(100));
        a.exposed(m(1050));
        assert_eq!((a.room(t(0)), a.exposure_wanted(m(300))), (m(350), None), "now the slice is what binds");
        // Idle, the next report holds half the last flow, the one after nothing.
        a.release(m(70));
        assert_eq!(a.report_exposure(Money::ZERO), Some(m(60)));
        assert_eq!(a.report_exposure(Money::ZERO), Some(Money::ZERO));
        a.exposed(Money::ZERO);
        assert_eq!(a.room(t(0)), Money::ZERO);
    }
}
