//! Refusing a request its budgets do not pay for: 429 `Budget exceeded` with what the budget holds, and
//! `budget.exceeded` once per period.
//!
//! On one node its view is the whole budget. In fleet mode a node sees only its slice, so a refusal is judged by
//! the store's totals: when the store cannot be asked (or this node's leases may have lapsed), when the fleet
//! still has room this node could not get in time, or when the room is held by a node that stopped renewing its
//! lease (cut off from the store, or dead: it returns when the lease expires), the answer is a 503 worth
//! retrying (`x-should-retry: true`), not a refusal, and nothing is announced. What live nodes hold, after they
//! were asked to give their spare back, counts as reserved. A fleet refusal's body says what the other nodes hold
//! (`held_by_other_nodes`), so that spent + reserved + held by other nodes + remaining make the limit.

use super::lease::Asked;
use super::{rfc3339, Ask, Budgets, Cell, Scope, Who};
use crate::refused::{Refused, Unjudged};
use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};
use svc_budget::{Money, Notice, Refusal};
use svc_config::AdmissionMode;
use svc_store::StoreError;

/// The 503 of a budget this node cannot judge: the store could not be asked (`fault`, logged with the answer).
pub(super) fn unreachable(fault: &StoreError) -> Refused {
    tracing::debug!(error = %fault, "the budget store cannot be asked");
    cut_off()
}

fn cut_off() -> Refused {
    Refused::Unjudged(Unjudged::StoreUnreachable)
}

impl Budgets {
    /// The currency label of amounts, when the config names one (`gateway_settings.currency`).
    fn currency(&self) -> Option<String> {
        self.config.load().gateway.currency.clone()
    }

    /// The answer to a request that does not fit account `index` (`refusal`, as described under its lock) after
    /// the store was `asked`; announces `budget.exceeded` when it is the period's first justified refusal.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn refuse(
        &self,
        cells: &[(Scope, Cell)],
        index: usize,
        refusal: Refusal,
        period_start: DateTime<Utc>,
        ask: &Ask,
        who: &Who,
        asked: Asked,
    ) -> Refused {
        let (scope, cell) = &cells[index];
        let now = self.now();
        let Some(leases) = &self.leases else {
            // One node: its view is the whole budget.
            if mark_exceeded(cell) {
                self.announce_refusal(scope, &refusal, who, period_start);
            }
            return refused(scope, &refusal, who, now, None, self.currency().as_deref());
        };
        if asked == Asked::Unreachable || !leases.reachable() {
            return cut_off();
        }
        let standing = match leases.standing(scope, period_start).await {
            Ok(Some(s)) => s,
            // Nobody leased from the period: all of it is free.
            Ok(None) => {
                svc_store::Standing { limit: refusal.limit.nanos(), free: refusal.limit.nanos(), ..Default::default() }
            }
            Err(fault) => return unreachable(&fault),
        };
        match judge(&standing, refusal.remaining, self.least_cost(ask)) {
            Judged::Moving => return Refused::Unjudged(Unjudged::RoomMoving),
            Judged::Stranded => return Refused::Unjudged(Unjudged::RoomStranded),
            Judged::Exceeded => {}
        }
        let unwritten = match cell.get().map(|e| e.account.lock()) {
            Some(Ok(a)) => a.slice().map_or(Money::ZERO, |s| s.unwritten),
            _ => Money::ZERO,
        };
        let fleet = fleet_refusal(&refusal, &standing, unwritten);
        if mark_exceeded(cell) {
            self.announce_refusal(scope, &fleet, who, period_start);
        }
        refused(scope, &fleet, who, now, Some(Money::from_nanos(standing.held_by_others)), self.currency().as_deref())
    }

    /// The least a request can be admitted with: its worst case with the smallest useful completion cap when
    /// `budget_admission` is `cap`, else its whole worst case.
    fn least_cost(&self, ask: &Ask) -> Money {
        let settings = self.config.load().gateway.admission;
        let least = settings.min_output_tokens.max(1);
        if settings.mode == AdmissionMode::Cap && least < ask.completion_tokens {
            ask.cost_with(least)
        } else {
            ask.worst_case()
        }
    }

    pub(super) fn announce_refusal(&self, scope: &Scope, r: &Refusal, who: &Who, period_start: DateTime<Utc>) {
        let notice = Notice::Exceeded {
            spent: r.spent,
            limit: r.limit,
            period: svc_budget::Period { start: period_start, end: r.reset },
            requested: Some(r.requested),
            remaining: Some(r.remaining),
        };
        self.announce(scope.clone(), notice, who.clone());
    }
}

/// What the store's totals say of a request this node cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged {
    /// The store's free room and this node's pay for it (room came back just now), or with the spare live nodes
    /// hold beyond what they may have answered, which they give back when asked (retry).
    Moving,
    /// Only with what silent nodes hold, which returns when their leases expire (retry).
    Stranded,
    /// Not even then: the rest is spent or held by live nodes (asked to give their spare back first).
    Exceeded,
}

/// Judges a request whose least admissible cost is `least` by the store's `standing` and this node's `room`.
fn judge(standing: &svc_store::Standing, room: Money, least: Money) -> Judged {
    let here = Money::from_nanos(standing.free).plus(room).plus(Money::from_nanos(standing.spare_of_live));
    if here >= least {
        Judged::Moving
    } else if here.plus(Money::from_nanos(standing.held_by_silent)) >= least {
        Judged::Stranded
    } else {
        Judged::Exceeded
    }
}

/// Whether the refusal is the period's first on this node (recorded now).
fn mark_exceeded(cell: &Cell) -> bool {
    match cell.get().map(|e| e.account.lock()) {
        Some(Ok(mut a)) => a.mark_exceeded(),
        _ => false,
    }
}

/// A fleet refusal in the store's figures: the fleet's spend (as written, and what this node has not written
/// yet), this node's reservations, and what is left once the other nodes' holdings are counted.
fn fleet_refusal(local: &Refusal, standing: &svc_store::Standing, unwritten: Money) -> Refusal {
    let limit = Money::from_nanos(standing.limit);
    let spent = Money::from_nanos(standing.spent).plus(unwritten);
    let held = Money::from_nanos(standing.held_by_others);
    let remaining = limit.minus(spent).minus(local.reserved).minus(held).at_least_zero();
    Refusal { limit, spent, remaining, ..local.clone() }
}

/// The 429 of a refused reservation: `Budget exceeded` plus machine-readable detail (spec 4.1 rule 1); in fleet
/// mode with what the other nodes hold.
fn refused(
    scope: &Scope,
    r: &Refusal,
    who: &Who,
    now: DateTime<Utc>,
    held: Option<Money>,
    currency: Option<&str>,
) -> Refused {
    let mut extra = budget_fields(scope, who, currency);
    extra.insert("limit".into(), json!(r.limit.as_f64()));
    extra.insert("spent".into(), json!(r.spent.as_f64()));
    extra.insert("reserved".into(), json!(r.reserved.as_f64()));
    if let Some(held) = held {
        extra.insert("held_by_other_nodes".into(), json!(held.as_f64()));
    }
    extra.insert("requested".into(), json!(r.requested.as_f64()));
    extra.insert("remaining".into(), json!(r.remaining.as_f64()));
    extra.insert("reset_at".into(), json!(rfc3339(r.reset)));
    let retry_after_secs = u64::try_from((r.reset - now).num_seconds()).unwrap_or(1).max(1);
    Refused::Budget { details: Box::new(extra), retry_after_secs }
}

/// Which budget, whose: the first fields of a budget event's data and of a refusal's details.
pub(super) fn budget_fields(scope: &Scope, who: &Who, currency: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("budget".into(), json!(scope.kind()));
    m.insert("team_id".into(), json!(who.team_id()));
    m.insert("key_alias".into(), json!(who.key_alias()));
    if let Some(c) = currency {
        m.insert("currency".into(), json!(c));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_fleet_refusal_adds_up_to_its_limit() {
        let reset = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).single().unwrap_or_default();
        let local = Refusal {
            limit: Money::from_nanos(5_000_000),
            spent: Money::from_nanos(1_000_000),
            reserved: Money::from_nanos(200_000),
            requested: Money::from_nanos(900_000),
            remaining: Money::from_nanos(100_000),
            reset,
            first_of_period: true,
        };
        let standing = svc_store::Standing {
            limit: 5_000_000,
            spent: 4_000_000,
            free: 0,
            held_by_others: 700_000,
            held_by_silent: 0,
            spare_of_live: 0,
        };
        let r = fleet_refusal(&local, &standing, Money::from_nanos(50_000));
        assert_eq!(
            (r.spent, r.reserved, r.remaining),
            (Money::from_nanos(4_050_000), local.reserved, Money::from_nanos(50_000))
        );
        assert_eq!(r.spent.plus(r.reserved).plus(Money::from_nanos(700_000)).plus(r.remaining), r.limit);
        let held = Some(Money::from_nanos(700_000));
        let refusal = refused(&Scope::Team("t".into()), &r, &Who::default(), reset, held, Some("USD"));
        let details = refusal.budget_details().cloned().unwrap_or_default();
        assert_eq!(details["held_by_other_nodes"], json!(0.0007));
        assert_eq!(details["currency"], "USD", "a refusal's amounts carry their currency label");
        assert_eq!(details["remaining"], json!(0.00005));
        // More held than the limit leaves (a lease read mid-settlement): nothing remains, never less.
        let crowded = svc_store::Standing { held_by_others: 9_000_000, ..standing };
        assert_eq!(fleet_refusal(&local, &crowded, Money::ZERO).remaining, Money::ZERO);
    }

    #[test]
    fn only_room_no_node_can_give_makes_a_refusal() {
        let m = Money::from_nanos;
        let standing = svc_store::Standing {
            limit: 1_000,
            spent: 600,
            free: 50,
            held_by_others: 350,
            held_by_silent: 200,
            spare_of_live: 0,
        };
        assert_eq!(judge(&standing, m(30), m(80)), Judged::Moving, "free room and this node's pay for it");
        assert_eq!(judge(&standing, m(0), m(80)), Judged::Stranded, "only with what a silent node holds");
        assert_eq!(judge(&standing, m(0), m(300)), Judged::Exceeded, "the rest is held by live nodes");
        let all_live = svc_store::Standing { held_by_silent: 0, ..standing };
        assert_eq!(judge(&all_live, m(0), m(80)), Judged::Exceeded);
        // Spare a live node holds beyond what it may have answered is room too: neither spent nor reserved.
        let spare = svc_store::Standing { spare_of_live: 40, ..all_live };
        assert_eq!(judge(&spare, m(0), m(80)), Judged::Moving, "free 50 and 40 of spare");
        assert_eq!(judge(&spare, m(0), m(100)), Judged::Exceeded);
    }

    #[test]
    fn a_cut_off_node_answers_a_503_worth_retrying() {
        let e = unreachable(&StoreError::Timeout(750));
        assert!(matches!(e, Refused::Unjudged(Unjudged::StoreUnreachable)), "{e:?}");
        assert_eq!(Unjudged::StoreUnreachable.code(), "budget_store_unreachable");
    }
}
