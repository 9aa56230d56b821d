//! Property tests of [`Account`] admission: for random sequences of admissions (`check` + `hold`),
//! settlements (`settle` at an actual cost at most the held amount), failures (`release`) and clock moves
//! across period ends, the spend settled into a period never exceeds the limit, `reserved` is never negative
//! and always equals the holds in flight, and each notice is announced at most once per period. The second
//! property runs the same operations from several threads sharing one account behind a lock, as the gateway
//! does.

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::collection::vec;
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Mutex;
use svc_budget::{Account, BudgetDuration, Money, Notice};

/// Alert thresholds (per-mille), as the default config's `[0.8]` and a few more.
const THRESHOLDS: [u32; 3] = [500, 800, 1000];

/// One step of a request's life, or of the clock.
#[derive(Debug, Clone)]
enum Op {
    /// A request with this worst-case cost asks to be admitted; it holds the amount when it is.
    Admit(i64),
    /// The hold at this index (modulo the holds in flight) settles at this per-mille of its amount.
    Settle(usize, u16),
    /// The hold at this index fails before any token: its reservation is dropped.
    Release(usize),
    /// The clock moves on by this per-mille of a period (over 1000: across one or more period ends).
    Advance(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0i64..=300_000).prop_map(Op::Admit),
        3 => (any::<usize>(), 0u16..=1000).prop_map(|(i, pm)| Op::Settle(i, pm)),
        1 => any::<usize>().prop_map(Op::Release),
        2 => (0u32..=2_500).prop_map(Op::Advance),
    ]
}

fn duration() -> impl Strategy<Value = BudgetDuration> {
    prop_oneof![
        3 => (1u64..=86_400).prop_map(BudgetDuration::Seconds),
        1 => (1u32..=3).prop_map(BudgetDuration::Months),
    ]
}

/// Roughly one period, in milliseconds, for scaling clock moves.
fn period_ms(d: BudgetDuration) -> i64 {
    match d {
        BudgetDuration::Seconds(s) => s as i64 * 1000,
        BudgetDuration::Months(n) => i64::from(n) * 30 * 86_400_000,
    }
}

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 31, 0, 0, 0).single().unwrap_or_default()
}

/// What the account should hold, kept apart from it: the spend settled into each period (keyed by the
/// period's end) and the notices announced in each.
#[derive(Debug, Default)]
struct Ledger {
    settled: HashMap<DateTime<Utc>, i64>,
    exceeded: HashMap<DateTime<Utc>, u32>,
    alerts: HashMap<(DateTime<Utc>, u32), u32>,
    /// Every hold in flight, whoever holds it.
    held: i64,
    admitted: u32,
}

/// The state shared by every holder: the account, the ledger and the clock (advanced by the holders).
struct Shared {
    account: Account,
    ledger: Ledger,
    now: DateTime<Utc>,
}

impl Shared {
    fn new(limit: i64, spent: i64, duration: BudgetDuration) -> Shared {
        let now = start();
        let account = Account::new(Money::from_nanos(limit), duration, now, Money::from_nanos(spent), now);
        let mut ledger = Ledger::default();
        ledger.settled.insert(account.period.end, spent);
        Shared { account, ledger, now }
    }

    /// Applies `op` for a holder whose holds in flight are `mine`.
    fn apply(&mut self, op: &Op, mine: &mut Vec<i64>) -> Result<(), TestCaseError> {
        match *op {
            Op::Admit(amount) => match self.account.check(Money::from_nanos(amount), self.now) {
                Ok(()) => {
                    self.account.hold(Money::from_nanos(amount));
                    mine.push(amount);
                    self.ledger.held += amount;
                    self.ledger.admitted += 1;
                }
                Err(refusal) => {
                    prop_assert!(
                        refusal.spent.nanos() + refusal.reserved.nanos() + amount > refusal.limit.nanos(),
                        "{refusal:?}"
                    );
                    if refusal.first_of_period {
                        *self.ledger.exceeded.entry(refusal.reset).or_default() += 1;
                    }
                }
            },
            Op::Settle(i, permille) if !mine.is_empty() => {
                let held = mine.swap_remove(i % mine.len());
                let actual = held * i64::from(permille) / 1000;
                let notices =
                    self.account.settle(Money::from_nanos(held), Money::from_nanos(actual), &THRESHOLDS, self.now);
                self.ledger.held -= held;
                *self.ledger.settled.entry(self.account.period.end).or_default() += actual;
                for notice in notices {
                    match notice {
                        Notice::Exceeded { period, .. } => *self.ledger.exceeded.entry(period.end).or_default() += 1,
                        Notice::Alert { threshold_permille, period, .. } => {
                            *self.ledger.alerts.entry((period.end, threshold_permille)).or_default() += 1
                        }
                    }
                }
            }
            Op::Release(i) if !mine.is_empty() => {
                let held = mine.swap_remove(i % mine.len());
                self.account.release(Money::from_nanos(held));
                self.ledger.held -= held;
            }
            Op::Settle(..) | Op::Release(_) => {}
            Op::Advance(permille) => {
                let ms = period_ms(self.account.duration) * i64::from(permille) / 1000;
                self.now += Duration::milliseconds(ms);
            }
        }
        self.check()
    }

    /// The invariants, true after every operation.
    fn check(&self) -> Result<(), TestCaseError> {
        let a = &self.account;
        prop_assert!(a.reserved.nanos() >= 0, "reserved went negative: {a:?}");
        prop_assert_eq!(a.reserved.nanos(), self.ledger.held, "reserved is not the holds in flight");
        prop_assert!(
            a.spent.nanos() + a.reserved.nanos() <= a.limit.nanos(),
            "spent + reserved over the limit: {:?}",
            a
        );
        let here = self.ledger.settled.get(&a.period.end).copied().unwrap_or_default();
        prop_assert_eq!(a.spent.nanos(), here, "spent is not what was settled in this period");
        for (end, spent) in &self.ledger.settled {
            prop_assert!(
                *spent <= a.limit.nanos(),
                "period ending {} settled {} over the limit {}",
                end,
                spent,
                a.limit.nanos()
            );
        }
        prop_assert!(self.ledger.exceeded.values().all(|n| *n <= 1), "exceeded twice: {:?}", self.ledger.exceeded);
        prop_assert!(self.ledger.alerts.values().all(|n| *n <= 1), "an alert twice: {:?}", self.ledger.alerts);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// One holder at a time, many holds in flight.
    #[test]
    fn settled_spend_never_exceeds_the_limit(
        limit in 0i64..=1_000_000,
        spent_permille in 0i64..=1000,
        duration in duration(),
        ops in vec(op(), 1..300),
    ) {
        let mut shared = Shared::new(limit, limit * spent_permille / 1000, duration);
        shared.check()?;
        let mut mine = Vec::new();
        for op in &ops {
            shared.apply(op, &mut mine)?;
        }
        // Whatever is still in flight fails: nothing stays reserved.
        while !mine.is_empty() {
            shared.apply(&Op::Release(0), &mut mine)?;
        }
        prop_assert_eq!(shared.account.reserved, Money::ZERO);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Several holders on their own threads, each checking and holding under the account's lock, as the
    /// gateway's admission does, and settling or failing later, interleaved with the others.
    #[test]
    fn concurrent_holders_never_overspend(
        limit in 0i64..=600_000,
        duration in duration(),
        scripts in vec(vec(op(), 1..200), 2..=4),
    ) {
        let shared = Mutex::new(Shared::new(limit, 0, duration));
        let results: Vec<Result<(), TestCaseError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = scripts
                .iter()
                .map(|script| {
                    let shared = &shared;
                    scope.spawn(move || -> Result<(), TestCaseError> {
                        let mut mine = Vec::new();
                        let lock = || shared.lock().map_err(|_| TestCaseError::fail("a holder panicked"));
                        for op in script {
                            lock()?.apply(op, &mut mine)?;
                            std::thread::yield_now();
                        }
                        while !mine.is_empty() {
                            lock()?.apply(&Op::Release(0), &mut mine)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(TestCaseError::fail("panicked")))).collect()
        });
        for result in results {
            result?;
        }
        let shared = shared.into_inner().map_err(|_| TestCaseError::fail("poisoned"))?;
        shared.check()?;
        prop_assert_eq!(shared.account.reserved, Money::ZERO);
    }
}
