//! What an admitted request holds in its budgets, until it is settled with its actual cost or dropped (a
//! failed call costs nothing).

use super::{Budgets, Cell, Scope, Who};
use std::sync::Arc;
use svc_budget::Money;
use svc_store::Charge;

/// What an admitted request holds in each budget.
#[must_use]
pub struct Reservation {
    pub(super) holds: Vec<(Scope, Cell, Money)>,
    pub(super) budgets: Option<Arc<Budgets>>,
    pub(super) who: Who,
}

impl Reservation {
    /// No budget applies.
    pub fn none() -> Reservation {
        Reservation { holds: Vec::new(), budgets: None, who: Who::default() }
    }

    /// What each budget holds for the request (zero when no budget applies).
    pub fn held(&self) -> Money {
        self.holds.first().map(|(_, _, m)| *m).unwrap_or(Money::ZERO)
    }

    /// Whether any budget applies.
    pub fn is_budgeted(&self) -> bool {
        !self.holds.is_empty()
    }

    /// Replaces the holds by the actual cost and announces crossed thresholds. The cost is what the meter
    /// decided (`pipeline::meter::charge`): above a hold only when the provider billed more than its bound, which
    /// is charged as billed and flagged by the caller. In fleet mode, returns the budgets (scope, period, limit)
    /// the spend record is charged to.
    pub fn settle(mut self, actual: Money) -> Vec<Charge> {
        let mut out = Vec::new();
        let Some(budgets) = self.budgets.take() else { return out };
        let now = budgets.now();
        let fleet = budgets.leases.is_some();
        for (scope, cell, held) in std::mem::take(&mut self.holds) {
            let charged = actual;
            let notices = match cell.get().map(|e| e.account.lock()) {
                Some(Ok(mut a)) => {
                    let notices =
                        a.settle(held, charged, &budgets.config.load().gateway.budget_alert_thresholds_permille, now);
                    if fleet {
                        a.unwritten(charged);
                        out.push(Charge {
                            scope: scope.label(),
                            period: a.period.start.timestamp_millis(),
                            limit: a.limit.nanos(),
                        });
                    }
                    notices
                }
                _ => Vec::new(),
            };
            for n in notices {
                budgets.announce(scope.clone(), n, self.who.clone());
            }
        }
        out
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        for (_, cell, held) in self.holds.drain(..) {
            if let Some(Ok(mut a)) = cell.get().map(|e| e.account.lock()) {
                a.release(held);
            }
        }
    }
}
