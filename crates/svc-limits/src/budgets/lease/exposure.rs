//! This node's exposure in each budget it leases (issue 28): the reports that keep the store told of the most
//! it may have answered and not written, and the asks for more when a request would pass what the store holds
//! (see the module documentation of `lease` and svc-budget's `Slice`).

use super::{bounded, nanos, Leases, STORE_WAIT};
use crate::budgets::{Budgets, Cell, Entry, Scope};
use chrono::{DateTime, Utc};
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::Ordering;
use svc_budget::Money;
use svc_store::{ChargedRecord, Exposure, StoreError};

impl Leases {
    /// A report of this node's exposure in `scope` (`written` of its unwritten spend going to the store with
    /// it), its ceiling lowered now (svc-budget's `Slice`); `None` when there is nothing to tell.
    pub(super) fn report(&self, scope: &Scope, e: &Entry, written: Money, now: DateTime<Utc>) -> Option<Exposure> {
        let mut a = e.account.lock().ok()?;
        a.roll(now);
        // Nothing leased, or nothing exposed and nothing the store holds to lower: nothing to report.
        if a.exposure() == Money::ZERO
            && a.slice()
                .is_none_or(|s| s.granted == Money::ZERO || (s.exposable == Money::ZERO && s.flow == Money::ZERO))
        {
            return None;
        }
        let exposure = a.report_exposure(written)?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        e.exposed.store(seq, Ordering::Relaxed);
        Some(Exposure {
            scope: scope.label(),
            period: a.period.start.timestamp_millis(),
            exposure: nanos(exposure),
            seq,
        })
    }

    /// The store took `x`, a report of this node's exposure: admission may use all of it, unless a newer report
    /// was made meanwhile (the store keeps the newest).
    pub(super) fn taken(e: &Entry, x: &Exposure) {
        if let Ok(mut a) = e.account.lock() {
            if e.exposed.load(Ordering::Relaxed) == x.seq && a.period.start.timestamp_millis() == x.period {
                a.exposed(Money::from_nanos(x.exposure));
            }
        }
    }

    /// Whether a request of worst case `full` is short in one of `cells` only of the exposure the store holds:
    /// requests admitted meanwhile took what its ask for more brought (it asks again).
    pub(in crate::budgets) fn exposure_binds(cells: &[(Scope, Cell)], full: Money) -> bool {
        cells.iter().any(|(_, c)| c.get().and_then(|e| e.account.lock().ok()).is_some_and(|a| a.exposure_binds(full)))
    }

    /// A request of worst case `full` would take this node's exposure in `scope` past what the store holds of
    /// it: tells the store of more first (with headroom, grown at each such ask). The caller holds
    /// `e.granting`. A report of the spend writer sent meanwhile wins over this one (it is newer, and may be
    /// lower): then asks again (a few times at most). The store is given [`STORE_WAIT`]; a failure is logged and
    /// pauses the admissions' asking (the request is then judged unable to ask, as for a grant).
    pub(super) async fn raise_exposure(&self, budgets: &Budgets, scope: &Scope, e: &Entry, full: Money) {
        for _ in 0..3 {
            if !self.reachable() {
                return;
            }
            let x = match e.account.lock() {
                Ok(mut a) => {
                    a.roll(budgets.now());
                    let Some(want) = a.exposure_wanted(full) else { return };
                    let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                    e.exposed.store(seq, Ordering::Relaxed);
                    let period = a.period.start.timestamp_millis();
                    Exposure { scope: scope.label(), period, exposure: nanos(want), seq }
                }
                Err(_) => return,
            };
            match bounded(STORE_WAIT, self.store.lease_expose(&self.node, std::slice::from_ref(&x))).await {
                Ok(_) => Leases::taken(e, &x),
                Err(err) => {
                    self.pause();
                    tracing::warn!(error = %err, budget = %x.scope, "cannot tell the store of this node's exposure");
                    return;
                }
            }
        }
    }
}

impl Budgets {
    /// Fleet mode: writes spend records to the store, each charged to its budgets' leases, with the reports of
    /// this node's exposure in those budgets in the same transaction (the records count as written in them).
    pub async fn write_spend(&self, records: &[ChargedRecord]) -> Result<i64, StoreError> {
        let Some(leases) = &self.leases else { return self.store.write_charged_spend(records).await };
        let mut written: HashMap<&str, i64> = HashMap::new();
        for r in records {
            for c in &r.charges {
                let sum = written.entry(c.scope.as_str()).or_insert(0);
                *sum = sum.saturating_add(r.record.cost);
            }
        }
        let now = self.now();
        let mut cells = Vec::with_capacity(written.len());
        let mut reports = Vec::with_capacity(written.len());
        for (label, amount) in written {
            let Some(scope) = Scope::from_label(label) else { continue };
            let Some(cell) = self.accounts.read().ok().and_then(|m| m.get(&scope).cloned()) else { continue };
            let Some(e) = cell.get() else { continue };
            if let Some(x) = leases.report(&scope, e, Money::from_nanos(amount), now) {
                reports.push(x);
                cells.push(cell);
            }
        }
        let n = self.store.write_charged_spend_exposed(records, &leases.node, &reports).await?;
        for (cell, x) in cells.iter().zip(&reports) {
            if let Some(e) = cell.get() {
                Leases::taken(e, x);
            }
        }
        Ok(n)
    }
}
